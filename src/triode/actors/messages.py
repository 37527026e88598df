"""Mailbox messages: frozen attrs classes, one union per mailbox.

Actor messages never reuse wire types: the HTTP layer translates a validated request into
plain values (token ids, `Sampling`, a compiled grammar) before any actor sees it.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ..model.engine import Command, Sampling, StepOutput

Reply = trio.MemorySendChannel


# ---- ModelActor mailbox ---------------------------------------------------------------------

@attrs.frozen
class Submit:
    """Asks for a generation slot; replies with an `Admission` or raises Overloaded."""

    prompt: tuple[int, ...]
    max_tokens: int
    sampling: Sampling
    grammar: Any
    top_logprobs: int | None
    reply: Reply


@attrs.frozen
class Release:
    """The consumer of `uid` is gone (finished reading, cancelled or disconnected)."""

    uid: int


@attrs.frozen
class Rendering:
    """A request's chat template started (or finished) rendering; `submits`: its Submit
    follows. The actor holds Inserts while requests are expected, to prefill them together."""

    started: bool
    submits: bool = False


@attrs.frozen
class Step:
    """From the engine thread: one step's outputs, posted to the trio thread (not a mailbox
    message: the engine never waits for the actor while sequences run)."""

    outputs: list[StepOutput]
    idle: bool
    prompt_cache: tuple[int, int] | None = None   # the engine's (entries, bytes); None: off


@attrs.frozen
class ModelStatisticsRequest:
    reply: Reply


ModelMessage = Submit | Release | Rendering | ModelStatisticsRequest

__all__ = ["Command", "ModelMessage", "Release", "Rendering", "Step", "Submit",
           "ModelStatisticsRequest"]
