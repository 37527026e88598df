"""The monitor: the last minutes of generation's figures, sampled once a second, for the live
page's plots (`/ui`, docs/observability.md).

Each model actor keeps counters and histograms since it started; a plot over time needs
their rates. The monitor asks the models registry for the loaded models' statistics every
SAMPLE_SECS (summing the models) and
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
from .model import idle_statistics
from .models import ModelsHandle

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


def sample(before: ModelStatistics | dict[str, ModelStatistics],
           now: ModelStatistics | dict[str, ModelStatistics], seconds: float, at: float
           ) -> Sample:
    """One interval's figures from the statistics at its two ends: one model's, or every
    loaded model's by id (summed over the models loaded at both ends; one whose counters
    went back was reloaded meanwhile and counts from zero)."""
    if isinstance(before, ModelStatistics) or isinstance(now, ModelStatistics):
        assert isinstance(before, ModelStatistics) and isinstance(now, ModelStatistics)
        before, now = {"": before}, {"": now}
    tokens = started = prompt = cached = 0
    ttft_sum = 0.0
    for key, n in now.items():
        b = before.get(key)
        if b is None or n.tokens_generated < b.tokens_generated:
            b = idle_statistics()
        tb, tn = b.generation.time_to_first_token, n.generation.time_to_first_token
        tokens += n.tokens_generated - b.tokens_generated
        started += tn.count - tb.count
        ttft_sum += tn.sum - tb.sum
        prompt += n.generation.prompt_tokens - b.generation.prompt_tokens
        cached += n.prompt_cache.cached_tokens - b.prompt_cache.cached_tokens
    return Sample(
        at=at, tokens_per_second=tokens / seconds,
        ttft=ttft_sum / started if started > 0 else None,
        queue_depth=sum(n.queue_depth for n in now.values()),
        slots_busy=sum(n.slots_busy for n in now.values()),
        cache_hit_share=min(1.0, cached / prompt) if prompt > 0 else None)


class Monitor:
    def __init__(self, models: ModelsHandle, *, every: float = SAMPLE_SECS,
                 keep: int = HISTORY_SAMPLES, clock: Callable[[], float] = time.time) -> None:
        """`clock`: the wall clock the samples are stamped with (the page plots by it)."""
        self._models = models
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
        before, then = await self._statistics(), trio.current_time()
        while True:
            await trio.sleep(self._every)
            now, at = await self._statistics(), trio.current_time()
            self._samples.append(sample(before, now, max(at - then, 1e-9), self._clock()))
            before, then = now, at

    async def _statistics(self) -> dict[str, ModelStatistics]:
        """Every loaded model's statistics, by id."""
        return {v.spec.id: v.statistics for v in await self._models.views()
                if v.statistics is not None}
