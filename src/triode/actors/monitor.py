"""The monitor: the last minutes of generation's figures, sampled once a second, for the live
page's plots (`/ui`, docs/observability.md).

The model actor keeps counters and histograms since it started; a plot over time needs
their rates. The monitor asks the model actor for its statistics every SAMPLE_SECS and
keeps the differences of the last HISTORY_SAMPLES samples: tokens per second, the mean time
to first token of the sequences that started in the interval, the queue depth and busy
slots at the sample, and the share of the interval's prompt tokens the prompt cache
supplied. It is the one owner of that history; the page's stream reads it by message.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

import attrs
import trio

from .mailbox import ReplyChannel, answer, ask
from .messages import ModelStatistics
from .model import ModelHandle

SAMPLE_SECS = 1.0
HISTORY_SAMPLES = 300          # five minutes
INBOX_SIZE = 64


@attrs.frozen
class Sample:
    """One interval's figures; None where the interval had nothing to measure."""

    at: float                      # wall clock, seconds
    tokens_per_second: float
    ttft: float | None             # mean, of the sequences whose first token came meanwhile
    queue_depth: int
    slots_busy: int
    cache_hit_share: float | None  # cached prompt tokens / prompt tokens, meanwhile


@attrs.frozen
class HistoryRequest:
    after: float                   # only the samples taken after this time
    reply: ReplyChannel[tuple[Sample, ...]]


class MonitorHandle:
    def __init__(self, inbox: trio.MemorySendChannel[HistoryRequest]) -> None:
        self._inbox = inbox

    async def history(self, after: float = 0.0) -> tuple[Sample, ...]:
        """The samples taken after `after` (wall clock), oldest first."""
        return await ask(self._inbox, lambda r: HistoryRequest(after, r))


def sample(before: ModelStatistics, now: ModelStatistics, seconds: float, at: float
           ) -> Sample:
    """The figures of the interval between two statistics `seconds` apart."""
    ttft_before, ttft_now = before.generation.time_to_first_token, now.generation.time_to_first_token
    started = ttft_now.count - ttft_before.count
    prompt = now.generation.prompt_tokens - before.generation.prompt_tokens
    cached = now.prompt_cache.cached_tokens - before.prompt_cache.cached_tokens
    return Sample(
        at=at, tokens_per_second=(now.tokens_generated - before.tokens_generated) / seconds,
        ttft=(ttft_now.sum - ttft_before.sum) / started if started > 0 else None,
        queue_depth=now.queue_depth, slots_busy=now.slots_busy,
        cache_hit_share=min(1.0, cached / prompt) if prompt > 0 else None)


class Monitor:
    def __init__(self, model: ModelHandle, *, every: float = SAMPLE_SECS,
                 keep: int = HISTORY_SAMPLES, clock: Callable[[], float] = time.time) -> None:
        """`clock`: the wall clock the samples are stamped with (the page plots by it)."""
        self._model = model
        self._every = every
        self._clock = clock
        self._samples: deque[Sample] = deque(maxlen=keep)

    async def run(self, *, task_status: trio.TaskStatus[MonitorHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        send, inbox = trio.open_memory_channel[HistoryRequest](INBOX_SIZE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sample)
            task_status.started(MonitorHandle(send))
            async for msg in inbox:
                answer(msg.reply, lambda: tuple(s for s in self._samples if s.at > msg.after))

    async def _sample(self) -> None:
        before, then = await self._model.statistics(), trio.current_time()
        while True:
            await trio.sleep(self._every)
            now, at = await self._model.statistics(), trio.current_time()
            self._samples.append(sample(before, now, max(at - then, 1e-9), self._clock()))
            before, then = now, at
