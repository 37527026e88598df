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
class Step:
    """From the engine thread: one step's outputs; replies with the pending commands."""

    outputs: list[StepOutput]
    idle: bool
    reply: Reply


@attrs.frozen
class EngineStopped:
    """The engine thread ended with an error; every request it held is lost."""

    error: BaseException


@attrs.frozen
class EngineStarted:
    """A fresh engine (after a restart) loaded the model and asks for work."""


@attrs.frozen
class EngineGaveUp:
    """The engine failed to restart; generation stays unavailable."""

    error: BaseException


@attrs.frozen
class ModelStatisticsRequest:
    reply: Reply


ModelMessage = (Submit | Release | Step | EngineStopped | EngineStarted | EngineGaveUp
                | ModelStatisticsRequest)

__all__ = ["Command", "EngineGaveUp", "EngineStarted", "EngineStopped", "ModelMessage",
           "Release", "Step", "Submit", "ModelStatisticsRequest"]
