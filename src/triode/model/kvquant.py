"""A quantized KV cache that mlx-lm's `BatchGenerator` can batch (`--kv-bits`).

mlx-lm quantizes KV caches for one sequence at a time (`QuantizedKVCache`); its server turns
batching off when `--kv-bits` is set, because `BatchKVCache` holds plain arrays. Here the
batched cache holds what `QuantizedKVCache` holds, a (packed values, scales, biases) triple
for the keys and one for the values, with `BatchKVCache`'s bookkeeping (left padding, one
offset per sequence, the shared write index), so every batch operation the generator uses
(merge, extend, filter, extract, trim, right-padding's roll) works on each array of the
triples. mlx-lm's attention sees the cache's `bits` and `group_size` and runs its quantized
attention, masked exactly as the plain batched cache would be.

A sequence starts with `SequenceQuantizedKVCache`s (one per layer), which the generator
merges into the batched cache; a finished sequence's extracted cache is one again, so the
prompt cache keeps it quantized too.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, cast

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, QuantizedKVCache, dynamic_roll

GROUP_SIZE = 64
Triple = tuple[mx.array, mx.array, mx.array]


def _map(f: Callable[[mx.array], mx.array], triple: Triple) -> Triple:
    a, b, c = triple
    return f(a), f(b), f(c)


class SequenceQuantizedKVCache(QuantizedKVCache):
    """mlx-lm's one-sequence quantized cache, mergeable into a batch."""

    keys: Any       # Triple, or None until the first update
    values: Any
    offset: int

    @classmethod
    def merge(cls, caches: Sequence[QuantizedKVCache]) -> "BatchQuantizedKVCache":
        return BatchQuantizedKVCache.merge(caches)


class BatchQuantizedKVCache(BatchKVCache):
    keys: Any            # Triple, or None until the first update
    values: Any
    offset: Any          # mx.array: each sequence's length
    left_padding: Any    # mx.array
    _right_padding: Any
    _idx: int

    def __init__(self, left_padding: list[int], group_size: int = GROUP_SIZE, bits: int = 8):
        super().__init__(left_padding)
        self.group_size = group_size
        self.bits = bits

    def _empty(self, batch: int, heads: int, length: int, dim: int, dtype: Any) -> Triple:
        per_word = 32 // self.bits
        return (mx.zeros((batch, heads, length, dim // per_word), dtype=mx.uint32),
                mx.zeros((batch, heads, length, dim // self.group_size), dtype=dtype),
                mx.zeros((batch, heads, length, dim // self.group_size), dtype=dtype))

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Triple, Triple]:
        prev = self._idx
        batch, heads, steps, k_dim = keys.shape
        if self.keys is None or prev + steps > self.keys[0].shape[2]:
            length = (self.step + steps - 1) // self.step * self.step
            new_k = self._empty(batch, heads, length, k_dim, keys.dtype)
            new_v = self._empty(batch, heads, length, values.shape[3], values.dtype)
            if self.keys is None:
                self.keys, self.values = new_k, new_v
            else:
                def grow(old: Triple, new: Triple) -> Triple:
                    a, b, c = (x[..., :prev, :] for x in old)
                    return (mx.concatenate([a, new[0]], axis=2),
                            mx.concatenate([b, new[1]], axis=2),
                            mx.concatenate([c, new[2]], axis=2))

                self.keys, self.values = grow(self.keys, new_k), grow(self.values, new_v)
        self.offset = self.offset + steps
        self._idx += steps
        q_keys = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        q_values = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        for i in range(3):
            self.keys[i][..., prev:self._idx, :] = q_keys[i]
            self.values[i][..., prev:self._idx, :] = q_values[i]
        return self.keys_and_values()

    def keys_and_values(self) -> tuple[Triple, Triple]:
        idx = self._idx
        return (_map(lambda x: x[..., :idx, :], self.keys),
                _map(lambda x: x[..., :idx, :], self.values))

    def finalize(self) -> None:
        if self._right_padding is not None:
            shifts = self._right_padding[:, None]
            roll = cast(Callable[..., mx.array], dynamic_roll)   # untyped in mlx-lm
            self.keys = _map(lambda x: roll(x, shifts, axis=2), self.keys)
            self.values = _map(lambda x: roll(x, shifts, axis=2), self.values)
            self.offset = self.offset - self._right_padding
            self.left_padding += self._right_padding
            self._right_padding = None

    def filter(self, batch_indices: Any) -> None:
        if self.keys is not None:
            self.keys = _map(lambda x: x[batch_indices], self.keys)
            self.values = _map(lambda x: x[batch_indices], self.values)
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        trim = min(cast(list[int], self.left_padding.tolist()))   # drop shared padding
        if trim > 0:
            if self.keys is not None:
                self.keys = _map(lambda x: x[..., trim:, :], self.keys)
                self.values = _map(lambda x: x[..., trim:, :], self.values)
            self._idx -= trim
            self.left_padding -= trim

    def extend(self, other: "BatchQuantizedKVCache") -> None:
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        idx = max(self._idx, other._idx)
        size = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)

        def aligned(c: BatchQuantizedKVCache) -> tuple[Triple, Triple, mx.array]:
            """c's arrays right-justified at `idx` and `size` long."""
            if c.keys is None:
                ref = self if self.keys is not None else other
                k, v = (_map(lambda x: mx.zeros((c.offset.shape[0], *x.shape[1:2], 0,
                                                 x.shape[3]), dtype=x.dtype), t)
                        for t in (ref.keys, ref.values))
            else:
                k, v = c.keys, c.values
            left = idx - c._idx
            right = size - k[0].shape[2] - left
            if right < 0:
                k, v = (_map(lambda x: x[..., :right, :], t) for t in (k, v))
                right = 0
            if left or right:
                pad = [(0, 0), (0, 0), (left, right), (0, 0)]
                k, v = (_map(lambda x: mx.pad(x, pad), t) for t in (k, v))
            return k, v, c.left_padding + left

        (k1, v1, p1), (k2, v2, p2) = aligned(self), aligned(other)
        self.keys = (mx.concatenate([k1[0], k2[0]]), mx.concatenate([k1[1], k2[1]]),
                     mx.concatenate([k1[2], k2[2]]))
        self.values = (mx.concatenate([v1[0], v2[0]]), mx.concatenate([v1[1], v2[1]]),
                       mx.concatenate([v1[2], v2[2]]))
        self.offset = mx.concatenate([self.offset, other.offset])
        self.left_padding = mx.concatenate([p1, p2])
        self._idx = idx

    def extract(self, idx: int) -> SequenceQuantizedKVCache:
        cache = SequenceQuantizedKVCache(group_size=self.group_size, bits=self.bits)
        padding = cast(list[int], self.left_padding.tolist())[idx]
        end = self._idx
        cache.keys = _map(lambda x: mx.contiguous(x[idx:idx + 1, :, padding:end]), self.keys)
        cache.values = _map(lambda x: mx.contiguous(x[idx:idx + 1, :, padding:end]),
                            self.values)
        cache.offset = end - padding
        return cache

    @classmethod
    def merge(cls, caches: Sequence[QuantizedKVCache]) -> "BatchQuantizedKVCache":
        group_size, bits = caches[0].group_size, caches[0].bits
        lengths = [0 if c.keys is None else c.offset for c in caches]
        longest = max(lengths)
        padding = [longest - n for n in lengths]
        cache = cls(padding, group_size, bits)
        if longest == 0:
            return cache
        ref = next(c for c in caches if c.keys is not None)

        def stacked(part: str) -> Triple:
            arrays = []
            for i in range(3):
                shape = getattr(ref, part)[i].shape
                out = mx.zeros((len(caches), shape[1], longest, shape[3]),
                               dtype=getattr(ref, part)[i].dtype)
                for b, (p, c) in enumerate(zip(padding, caches)):
                    if c.keys is not None:
                        out[b:b + 1, :, p:] = getattr(c, part)[i][..., :c.offset, :]
                arrays.append(out)
            return arrays[0], arrays[1], arrays[2]

        cache.keys, cache.values = stacked("keys"), stacked("values")
        cache.offset += longest
        cache._idx = longest
        return cache

    @property
    def state(self) -> tuple[Any, ...]:
        return self.keys, self.values, self.offset, self.left_padding, self._idx

    @state.setter
    def state(self, v: tuple[Any, ...]) -> None:
        self.keys, self.values, self.offset, self.left_padding, self._idx = v

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return sum(int(x.nbytes) for x in (*self.keys, *self.values))


def quantized_cache(model: Any, bits: int) -> list[SequenceQuantizedKVCache]:
    """A new sequence's cache: one quantized cache per layer. Refused (ValueError) for models
    whose layers need another kind (sliding windows, state-space layers)."""
    if hasattr(model, "make_cache"):
        raise ValueError("--kv-bits needs a model whose layers all use a plain KV cache; "
                         "this one makes its own caches (sliding windows, other layer kinds "
                         "or M-RoPE positions)")
    dims = {getattr(model.args, "head_dim", None) or
            model.args.hidden_size // model.args.num_attention_heads}
    if any(d % GROUP_SIZE for d in dims):
        raise ValueError(f"--kv-bits needs a head dimension divisible by {GROUP_SIZE}")
    return [SequenceQuantizedKVCache(group_size=GROUP_SIZE, bits=bits)
            for _ in range(len(model.layers))]
