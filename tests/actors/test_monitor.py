"""The monitor's samples: each interval's rates from two statistics, and the history it
keeps (the last `keep` samples, read after a time)."""

from __future__ import annotations

import attrs
import trio
import trio.testing

from triode.actors.messages import (GenerationStatistics, HistogramStatistics,
                                    ModelStatistics, PromptCacheStatistics)
from triode.actors.monitor import Monitor, sample


def histogram(count: int, total: float) -> HistogramStatistics:
    return HistogramStatistics(bounds=(1.0,), cumulative=(count,), count=count, sum=total)


def stats(*, tokens: int = 0, queue: int = 0, busy: int = 0, first_tokens: int = 0,
          ttft_sum: float = 0.0, prompt: int = 0, cached: int = 0) -> ModelStatistics:
    empty = histogram(0, 0.0)
    return ModelStatistics(
        slots_total=4, slots_busy=busy, queue_depth=queue, queue_max=8, engine_alive=True,
        engine_restarts=0, engine_error=None, steps=0, tokens_generated=tokens,
        requests_admitted=0, requests_rejected=0, rendering=0,
        prompt_cache=PromptCacheStatistics(max_bytes=1, entries=0, bytes=0, hits=0,
                                           cached_tokens=cached),
        generation=GenerationStatistics(
            started=first_tokens, prompt_tokens=prompt, outcomes={}, queue_wait=empty,
            time_to_first_token=histogram(first_tokens, ttft_sum),
            time_per_output_token=empty, duration=empty))


def test_a_sample_is_the_interval_s_rates():
    """Tokens per second over the interval, the mean TTFT of the sequences that started in
    it, the queue and slots as they are, the cached share of its prompt tokens."""
    before = stats(tokens=100, first_tokens=2, ttft_sum=0.5, prompt=40, cached=10)
    after = stats(tokens=160, queue=3, busy=2, first_tokens=5, ttft_sum=1.4, prompt=140,
                  cached=85)
    s = sample(before, after, 2.0, at=7.0)
    assert (s.at, s.tokens_per_second, s.queue_depth, s.slots_busy) == (7.0, 30.0, 3, 2)
    assert abs(s.ttft - 0.3) < 1e-12 and s.cache_hit_share == 0.75


def test_an_interval_with_nothing_started_has_no_ttft_and_no_share():
    """None, not 0, where the interval had nothing to measure."""
    same = stats(tokens=10, first_tokens=1, ttft_sum=0.2, prompt=5)
    s = sample(same, same, 1.0, at=0.0)
    assert s.tokens_per_second == 0.0 and s.ttft is None and s.cache_hit_share is None


def test_a_sample_sums_the_loaded_models_and_a_reloaded_one_counts_from_zero():
    """Several models: their rates add up; a model that loaded meanwhile counts from zero,
    and one whose counters went back (unloaded and loaded again) counts from zero too."""
    before = {"a": stats(tokens=100, busy=1), "b": stats(tokens=500)}
    after = {"a": stats(tokens=130, busy=2), "b": stats(tokens=20, busy=1),
             "c": stats(tokens=10, queue=4)}
    s = sample(before, after, 1.0, at=0.0)
    assert s.tokens_per_second == 30 + 20 + 10
    assert (s.slots_busy, s.queue_depth) == (3, 4)


@attrs.frozen
class Spec:
    id: str


@attrs.frozen
class View:
    spec: Spec
    statistics: ModelStatistics | None


@attrs.define
class CountingModel:
    """A models handle whose one loaded model's token count grows by 10 each time it is
    asked (a second model is not loaded)."""

    tokens: int = 0

    async def views(self) -> list[View]:
        self.tokens += 10
        return [View(Spec("m"), stats(tokens=self.tokens)), View(Spec("idle"), None)]


async def test_the_history_keeps_the_last_samples(autojump_clock: trio.testing.MockClock):
    """One sample per interval, at most `keep` of them; `history(after)` gives those taken
    after a time."""
    async with trio.open_nursery() as nursery:
        monitor = await nursery.start(Monitor(CountingModel(), every=1.0, keep=3,  # type: ignore[arg-type]
                                               clock=trio.current_time).run)
        await trio.sleep(5.5)
        samples = await monitor.history()
        assert len(samples) == 3 and all(s.tokens_per_second == 10.0 for s in samples)
        assert await monitor.history(samples[1].at) == samples[2:]
        nursery.cancel_scope.cancel()
