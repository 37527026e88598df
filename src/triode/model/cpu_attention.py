"""Attention on the CPU with its softmax in MKL's vector math.

MLX's CPU backend computes `exp` one element at a time (about 60M elements/s here), and
attention's softmax is `exp` over every query-key pair: a 2,350-token prompt spends most of
its prefill there, and a long conversation most of each decode step. MKL's `vmsExp`, already
in the process under MLX's BLAS (model/blas.py), does the same at about 2.4G elements/s on
two threads. So when a call's score matrix is large enough to pay for leaving MLX's graph
(`PREFILL_QUERIES`, `MIN_DECODE_KEYS`, `MIN_ROW_SCORES`), attention runs here: scores by
MLX (MKL's sgemm), the mask, the row maxima and sums in NumPy and the exponentials in MKL, in place on the scores' own buffer, then the
weighted values by MLX again. Smaller calls, attention sinks and non-float32 inputs keep
MLX's own kernel. The result equals MLX's to float32 rounding (tests/model/test_cpu_attention.py).

`install()` puts this behind `mx.fast.scaled_dot_product_attention`, the function every mlx-lm
(and mlx-vlm) model's attention goes through, for the process; `routed()` does so for as long
as a block runs (counted: the last to leave uninstalls it). The engine runs in `routed()`
when the model is on the CPU with MKL loaded, so nothing outside a running engine (another
engine's tests, a bench comparing with MLX's own kernels) sees it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from typing import Any, Callable, Iterator

from . import blas

log = logging.getLogger(__name__)

# When a call leaves MLX: a prompt's chunk of PREFILL_QUERIES queries or more always; fewer
# queries (a decode step, or the few of a speculative verifying pass) when each sequence
# has MIN_DECODE_KEYS keys or more and each query row MIN_ROW_SCORES scores (batch x heads
# x keys) or more. Below that, leaving MLX's graph (one synchronisation per layer) costs more
# than MLX's exp: SmolLM2 decoding one sequence crosses over between 1,000 and 2,350 keys (9
# heads; bench/cpu_kernels.py), and a batch of short sequences loses however many scores it
# has (8 rows at 300 keys: 11% slower a step, 32 at 250: 18%; 8 at 1,200 keys: 11% faster;
# docs/benchmarks.md). The rule never looks at how many queries a decode-sized call has, so
# a speculative verifying pass runs the same kernels as the plain step it stands for.
PREFILL_QUERIES = 64
MIN_DECODE_KEYS = 1024
MIN_ROW_SCORES = 1 << 14
# Score elements computed at once: longer prompts run in blocks of queries (64 MiB of float32).
MAX_BLOCK_SCORES = 1 << 24
# MKL's "low accuracy" mode (1-4 ulp, ample for a softmax), without its error handling
# (which makes an underflowing exp ~100x slower).
VML_MODE = 0x1 | 0x100   # VML_LA | VML_ERRMODE_IGNORE
# Shifted scores are clamped here before the exp: exp(-80) is still a normal float (~1e-35,
# nothing next to the row's largest weight, 1), and MKL's exp of anything far lower (a masked
# score) underflows on a path ~10x slower than the rest.
EXP_FLOOR = -80.0

_original: Callable[..., Any] | None = None
_vexp: Any = None
_users = 0   # routed() blocks running
_local = threading.local()   # .mlx: in a `mlx_kernels()` block on this thread


def installed() -> bool:
    return _original is not None


def install() -> bool:
    """Routes MLX's scaled dot-product attention through `attention`; False (nothing done)
    without MKL."""
    global _original, _vexp
    if _original is not None:
        return True
    library = blas.mkl()
    if library is None:
        return False
    import mlx.core as mx

    _vexp = library.vmsExp
    _vexp.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    _vexp.restype = None
    fast: Any = mx.fast
    _original = fast.scaled_dot_product_attention
    fast.scaled_dot_product_attention = attention
    log.info("attention: softmax in MKL's vector math for prompts and for decode calls of "
             "%d keys and %d scores a row or more", MIN_DECODE_KEYS, MIN_ROW_SCORES)
    return True


@contextlib.contextmanager
def routed() -> Iterator[bool]:
    """Installed for the block (whether it could be: MKL is loaded); uninstalled when the
    last block routed so ends."""
    global _users
    on = install()
    _users += on
    try:
        yield on
    finally:
        _users -= on
        if on and not _users:
            uninstall()


@contextlib.contextmanager
def mlx_kernels() -> Iterator[None]:
    """MLX's own attention for the block, on this thread, routed or not: for code that may
    run attention inside an MLX transformation (a compiled vision tower), where nothing can
    leave MLX's graph."""
    before = getattr(_local, "mlx", False)
    _local.mlx = True
    try:
        yield
    finally:
        _local.mlx = before


def uninstall() -> None:
    global _original
    if _original is None:
        return
    import mlx.core as mx

    fast: Any = mx.fast
    fast.scaled_dot_product_attention = _original
    _original = None


def attention(queries: Any, keys: Any, values: Any, *, scale: float, mask: Any = None,
              sinks: Any = None, stream: Any = None) -> Any:
    """`mx.fast.scaled_dot_product_attention`'s contract: queries (B, H, L, D), keys and
    values (B, Hkv, S, D) with H a multiple of Hkv, `mask` None, "causal" (the last L keys
    are the queries' own positions) or an array broadcastable to (B, H, L, S): boolean (True
    attends) or additive."""
    import mlx.core as mx

    assert _original is not None
    batch, heads, length, _ = queries.shape
    kv_heads, span = keys.shape[1], keys.shape[2]
    if (sinks is not None or getattr(_local, "mlx", False)
            or (length < PREFILL_QUERIES
                and (span < MIN_DECODE_KEYS or batch * heads * span < MIN_ROW_SCORES))
            or queries.dtype != mx.float32 or keys.dtype != mx.float32
            or (isinstance(mask, str) and mask != "causal")):
        return _original(queries, keys, values, scale=scale, mask=mask, sinks=sinks)
    rows = max(1, MAX_BLOCK_SCORES // max(1, batch * heads * span))
    if rows >= length:
        return _block(queries, keys, values, scale, mask, 0, length)
    return mx.concatenate([_block(queries, keys, values, scale, mask, start,
                                  min(length, start + rows))
                           for start in range(0, length, rows)], axis=2)


def _block(queries: Any, keys: Any, values: Any, scale: float, mask: Any, start: int,
           stop: int) -> Any:
    """Attention of the queries start..stop (of L) over every key."""
    import mlx.core as mx
    import numpy as np

    batch, heads, length, dims = queries.shape
    kv_heads, span = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    rows = stop - start
    # The heads sharing a key head are one matrix product: (B, Hkv, group*rows, D) @ K^T.
    q = (queries[:, :, start:stop] * scale).reshape(batch, kv_heads, group * rows, dims)
    scores = q @ keys.swapaxes(-1, -2)
    dense = None
    if isinstance(mask, mx.array):
        dense = mask[..., start:stop, :] if mask.ndim >= 2 and mask.shape[-2] == length \
            else mask
        mx.eval(scores, dense)
    else:
        mx.eval(scores)
    s = np.asarray(scores).reshape(batch, kv_heads, group, rows, span)
    # Masked scores become float32's lowest, as MLX's own kernel masks: a row with nothing
    # to attend to (a batch's left padding) averages its values instead of making NaNs.
    lowest = np.finfo(np.float32).min
    if isinstance(mask, str):   # causal: query i sees keys up to span - length + i
        first = span - length + start
        np.copyto(s, lowest,
                  where=np.arange(span)[None, :] > first + np.arange(rows)[:, None])
    elif dense is not None:
        m = np.asarray(dense)
        m = m.reshape((1,) * (4 - m.ndim) + m.shape)
        # (B, 1 or H, rows, S) as (B, 1 or Hkv, 1 or group, rows, S): broadcasts, no copy
        m = m.reshape(m.shape[0], *((1, 1) if m.shape[1] == 1 else (kv_heads, group)),
                      *m.shape[2:])
        if m.dtype == np.bool_:
            np.copyto(s, lowest, where=~m)
        else:
            s += m
    s -= s.max(axis=-1, keepdims=True)
    np.maximum(s, EXP_FLOOR, out=s)
    _vexp(s.size, s.ctypes.data, s.ctypes.data, VML_MODE)
    s /= s.sum(axis=-1, keepdims=True)
    weights = mx.array(s.reshape(batch, kv_heads, group * rows, span))
    return (weights @ values).reshape(batch, heads, rows, dims)
