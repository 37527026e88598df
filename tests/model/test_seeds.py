"""A seeded sampler for every seed a request may carry (translate.RANGES: signed 64-bit)."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from triode.model.engine import sampler_for  # noqa: E402
from triode.model.request import Sampling  # noqa: E402

VOCAB = 10


@pytest.mark.parametrize("seed", [-(2**63), -1, 0, 2**63 - 1])
def test_every_accepted_seed_makes_a_sampler_that_draws(seed):
    """Negative seeds too: MLX's key takes an unsigned integer, and a TypeError there would
    kill the engine thread (every running response with it)."""
    sample = sampler_for(Sampling(temperature=1.0, seed=seed))
    token = sample(mx.log(mx.ones((1, VOCAB)) / VOCAB))
    assert 0 <= token.item() < VOCAB


def test_a_negative_seed_repeats_its_draws():
    logprobs = mx.log(mx.ones((1, 1000)) / 1000)
    first, second = (sampler_for(Sampling(temperature=1.0, seed=-7)) for _ in range(2))
    assert [first(logprobs).item() for _ in range(5)] == \
        [second(logprobs).item() for _ in range(5)]
