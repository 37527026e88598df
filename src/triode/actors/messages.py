"""Mailbox messages: frozen attrs classes, one union per mailbox.

Actor messages never reuse wire types: the turn service translates a validated request
into plain values (a `GenerationRequest`: token ids, sampling, a compiled grammar) before
any actor sees it (docs/architecture.md).
"""

from __future__ import annotations

import attrs
import trio

from ..model.engine import Command, StepOutput
from ..model.lockstep import RankFigures
from ..model.request import GenerationRequest
from ..model.speculative_stats import SpeculationStatistics
from .mailbox import ReplyChannel as Reply


# ---- ModelActor mailbox ---------------------------------------------------------------------

@attrs.frozen
class Submit:
    """Asks for a generation slot; replies with an `Admission` or raises Overloaded."""

    request: GenerationRequest
    reply: Reply[Admission]


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
class ModelStatisticsRequest:
    reply: Reply[ModelStatistics]


# ---- replies ----------------------------------------------------------------------------------

@attrs.frozen
class Admission:
    """The reply to Submit: where the request's step outputs arrive."""

    uid: int
    outputs: trio.MemoryReceiveChannel[StepOutput]


@attrs.frozen
class ModelStatistics:
    slots_total: int
    slots_busy: int
    queue_depth: int
    queue_max: int
    engine_alive: bool
    engine_restarts: int
    engine_error: str | None   # the last engine failure, if any
    steps: int
    tokens_generated: int
    requests_admitted: int
    requests_rejected: int
    rendering: int        # chat templates being rendered, or waiting for a render thread
    prompt_cache: PromptCacheStatistics
    generation: GenerationStatistics
    speculation: SpeculationStatistics | None = None   # None: --speculative off
    distributed: DistributedStatistics | None = None   # None: one process


@attrs.frozen
class DistributedStatistics:
    """--distributed: the group of ranks rank 0's engine leads."""

    mode: str                         # pipeline or tensor
    ranks: tuple[RankFigures, ...]    # each rank's engine figures, as last gathered
    failure: str | None               # why the group failed; None: it serves


@attrs.frozen
class GenerationStatistics:
    """What generation has done since the actor started: token counts, how sequences ended,
    and the latency histograms (seconds, from the Submit that asked for the slot)."""

    started: int              # sequences that reached their first token
    prompt_tokens: int        # their prompt tokens, the cached ones included
    outcomes: dict[str, int]  # sequences by how they ended (a fresh copy): model.OUTCOMES
    queue_wait: HistogramStatistics           # Submit → slot
    time_to_first_token: HistogramStatistics  # Submit → first token (queue + prefill)
    time_per_output_token: HistogramStatistics  # first → last token, per token after the
                                                # first, of sequences that finished
    duration: HistogramStatistics             # Submit → last token, of sequences that finished


@attrs.frozen
class HistogramStatistics:
    """A histogram's state as Prometheus reports it: `cumulative[i]` observations were at
    most `bounds[i]`; `count` is all of them (the `+Inf` bucket)."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    count: int
    sum: float


@attrs.frozen
class PromptCacheStatistics:
    max_bytes: int        # --prompt-cache-bytes; 0: off
    entries: int          # cached sequences, as the engine last reported
    bytes: int
    hits: int             # requests whose prefill started from a cached prefix
    cached_tokens: int    # prompt tokens those requests did not prefill
    # The disk tier (--prompt-cache-dir; all 0 without it), as the engine last reported:
    disk_max_bytes: int = 0      # --prompt-cache-disk-bytes
    disk_entries: int = 0
    disk_bytes: int = 0
    disk_hits: int = 0           # prompts prefilled from an entry loaded back from disk
    disk_writes: int = 0         # entries written
    disk_write_errors: int = 0   # writes that failed (disk full, unwritable) or were dropped
    disk_skipped: int = 0        # files skipped: truncated, corrupt, another configuration's


ModelMessage = Submit | Release | Rendering | ModelStatisticsRequest

__all__ = ["Admission", "Command", "GenerationStatistics", "HistogramStatistics", "ModelMessage",
           "ModelStatistics", "ModelStatisticsRequest", "PromptCacheStatistics", "Release",
           "Rendering", "Submit"]
