"""The prefill pacer: chunk sizes from measured step times and prefill rates."""

import pytest

from triode.model.pacing import FIRST_CHUNK, MAX_CHUNK, MIN_CHUNK, PrefillPacer


def measured(step: float = 0.01, rate: float = 20_000.0) -> PrefillPacer:
    pacer = PrefillPacer()
    pacer.observe(seconds=step, prompt_tokens=0, prompt_seconds=0.0)
    pacer.observe(seconds=1.0, prompt_tokens=int(rate), prompt_seconds=1.0)
    return pacer


def test_a_prompt_alone_is_prefilled_in_full_chunks():
    assert PrefillPacer().chunk(decoding=0, prefilling=1) == MAX_CHUNK
    assert measured().chunk(decoding=0, prefilling=3) == MAX_CHUNK


def test_before_any_measurement_a_small_chunk_measures_the_rate():
    assert PrefillPacer().chunk(decoding=4, prefilling=1) == FIRST_CHUNK


def test_a_chunk_takes_half_a_decode_step():
    # 10 ms steps, 20,000 prompt tokens/s: half a step is 100 tokens.
    assert measured().chunk(decoding=8, prefilling=1) == 100


def test_prompts_prefilled_together_share_the_budget():
    assert measured().chunk(decoding=8, prefilling=2) == 50
    assert measured().chunk(decoding=8, prefilling=4) == MIN_CHUNK   # 25, raised to the floor


@pytest.mark.parametrize("step, rate, expected", [
    (0.001, 1_000.0, MIN_CHUNK),          # 0.5 tokens: never below the floor
    (10.0, 1_000_000.0, MAX_CHUNK),       # 5M tokens: never above mlx-lm's own step
    (0.01, 2 * MAX_CHUNK / 0.01, MAX_CHUNK),        # exactly at the ceiling
    (0.01, 2 * MIN_CHUNK / 0.01, MIN_CHUNK),        # exactly at the floor
    (0.01, 2 * (MIN_CHUNK + 1) / 0.01, MIN_CHUNK + 1),   # one over the floor
])
def test_chunk_limits(step, rate, expected):
    assert measured(step, rate).chunk(decoding=1, prefilling=1) == expected


def test_a_fixed_chunk_is_used_as_given():
    pacer = PrefillPacer(fixed=512)
    assert pacer.chunk(decoding=0, prefilling=1) == 512
    assert pacer.chunk(decoding=8, prefilling=1) == 512


def test_measurements_are_smoothed():
    pacer = measured(step=0.01)
    pacer.observe(seconds=0.11, prompt_tokens=0, prompt_seconds=0.0)   # one slow step
    assert pacer.step_seconds == pytest.approx(0.01 + 0.2 * 0.1)
    # A step that prefilled does not count as a decode step, and a zero-length one is ignored.
    pacer.observe(seconds=5.0, prompt_tokens=10, prompt_seconds=0.0)
    pacer.observe(seconds=0.0, prompt_tokens=0, prompt_seconds=0.0)
    assert pacer.step_seconds == pytest.approx(0.03)
    assert pacer.prefill_rate == pytest.approx(20_000.0)
