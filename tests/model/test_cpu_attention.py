"""Attention with its softmax in MKL's vector math equals MLX's own kernel."""

from __future__ import annotations

import pytest

from triode.model import blas

blas.preload_blas("auto")

import mlx.core as mx  # noqa: E402

from triode.model import cpu_attention  # noqa: E402

pytestmark = pytest.mark.skipif(blas.mkl() is None, reason="needs MKL (Linux x86_64)")


@pytest.fixture(autouse=True)
def installed():
    assert cpu_attention.install()
    yield
    cpu_attention.uninstall()


def inputs(batch, heads, kv_heads, length, span, seed=0):
    mx.random.seed(seed)
    return (mx.random.normal((batch, heads, length, 64)),
            mx.random.normal((batch, kv_heads, span, 64)) * 2,
            mx.random.normal((batch, kv_heads, span, 64)))


def mlx_own(q, k, v, mask):
    assert cpu_attention._original is not None
    return cpu_attention._original(q, k, v, scale=0.125, mask=mask)


def close(a, b):
    return float(mx.max(mx.abs(a - b))) < 1e-5 and not bool(mx.any(mx.isnan(a)))


@pytest.mark.parametrize("shape", [(1, 9, 3, 512, 700), (2, 4, 2, 64, 64), (1, 3, 3, 300, 900)])
def test_causal_prefill_chunks(shape):
    """A prompt's chunk after a cached prefix: the last L keys are the queries' own."""
    q, k, v = inputs(*shape)
    assert close(cpu_attention.attention(q, k, v, scale=0.125, mask="causal"),
                 mlx_own(q, k, v, "causal"))


def test_decode_over_a_long_context_without_a_mask():
    q, k, v = inputs(1, 9, 3, 1, 5000)
    assert close(cpu_attention.attention(q, k, v, scale=0.125), mlx_own(q, k, v, None))


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_batched_decode_with_padding_masks(kind):
    """A batch's left padding as a boolean or additive mask broadcast over heads."""
    q, k, v = inputs(8, 9, 3, 1, 1100)
    assert 1100 >= cpu_attention.MIN_DECODE_KEYS
    keep = mx.random.uniform(shape=(8, 1, 1, 1100)) > 0.2
    mask = keep if kind == "bool" else mx.where(keep, 0.0, -1e9)
    assert close(cpu_attention.attention(q, k, v, scale=0.125, mask=mask),
                 mlx_own(q, k, v, mask))


def test_a_row_with_nothing_to_attend_to_averages_as_mlx_does():
    """A fully masked query row (left padding) gives MLX's uniform average, never NaN."""
    q, k, v = inputs(2, 4, 2, 40, 900)
    mask = mx.random.uniform(shape=(2, 1, 40, 900)) > 0.5
    mask[0, :, 3, :] = False
    assert close(cpu_attention.attention(q, k, v, scale=0.125, mask=mask),
                 mlx_own(q, k, v, mask))


def test_long_prompts_run_in_blocks_of_queries():
    """Past MAX_BLOCK_SCORES the queries run in blocks; the result is the same."""
    q, k, v = inputs(1, 9, 3, 2000, 2000)
    assert 9 * 2000 * 2000 > cpu_attention.MAX_BLOCK_SCORES
    assert close(cpu_attention.attention(q, k, v, scale=0.125, mask="causal"),
                 mlx_own(q, k, v, "causal"))


def test_small_calls_and_sinks_stay_with_mlx():
    """Decode rows under MIN_ROW_SCORES or MIN_DECODE_KEYS, whatever their number of queries (a speculative
    verifying pass routes as the plain step it stands for), and attention sinks keep MLX's
    own kernel (same bits)."""
    for length in (1, 9, cpu_attention.PREFILL_QUERIES - 1):
        q, k, v = inputs(1, 9, 3, length, 1800)
        assert 9 * 1800 < cpu_attention.MIN_ROW_SCORES
        assert mx.array_equal(cpu_attention.attention(q, k, v, scale=0.125, mask="causal"),
                              mlx_own(q, k, v, "causal"))
    # A batch of short sequences stays too, however many scores it has in all.
    q, k, v = inputs(32, 9, 3, 1, 300)
    assert 300 < cpu_attention.MIN_DECODE_KEYS and 32 * 9 * 300 >= cpu_attention.MIN_ROW_SCORES
    assert mx.array_equal(cpu_attention.attention(q, k, v, scale=0.125), mlx_own(q, k, v, None))
    q, k, v = inputs(1, 4, 2, 64, 600)
    sinks = mx.zeros((4,))
    own = cpu_attention._original(q, k, v, scale=0.125, mask="causal", sinks=sinks)
    assert mx.array_equal(cpu_attention.attention(q, k, v, scale=0.125, mask="causal",
                                                  sinks=sinks), own)


def test_routed_blocks_count_and_the_last_to_leave_uninstalls():
    """An engine routes attention for its lifetime only; two at once share the routing."""
    cpu_attention.uninstall()
    own = mx.fast.scaled_dot_product_attention
    with cpu_attention.routed() as first:
        assert first and mx.fast.scaled_dot_product_attention is cpu_attention.attention
        with cpu_attention.routed():
            pass
        assert mx.fast.scaled_dot_product_attention is cpu_attention.attention
    assert mx.fast.scaled_dot_product_attention is own and not cpu_attention.installed()
    assert cpu_attention.install()   # the fixture's uninstall expects it
