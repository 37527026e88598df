"""Mailbox messages: frozen attrs classes, one union per mailbox.

Actor messages never reuse wire types: the HTTP layer translates a validated request into a
`GenerationSpec` before any actor sees it.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ..model.engine import Command, Sampling, StepOutput

Reply = trio.MemorySendChannel


# ---- what a response asks of the model ------------------------------------------------------

@attrs.frozen
class GenerationSpec:
    """Everything the supervisor needs to run one response (already validated)."""

    response_id: str
    messages: tuple[dict, ...]          # chat messages for the template
    max_output_tokens: int | None
    sampling: Sampling
    echo: dict[str, Any]                # request fields echoed on the response object
    background: bool = False
    stream: bool = False


# ---- ModelActor mailbox ---------------------------------------------------------------------

@attrs.frozen
class Submit:
    """Asks for a generation slot; replies with a `GenerationStream` or raises Overloaded."""

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
class ModelStatisticsRequest:
    reply: Reply


ModelMessage = Submit | Release | Step | EngineStopped | ModelStatisticsRequest

__all__ = ["Command", "EngineStopped", "GenerationSpec", "ModelMessage", "Release", "Step",
           "Submit", "ModelStatisticsRequest"]
