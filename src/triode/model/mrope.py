"""Multimodal rotary positions (M-RoPE: Qwen2-VL, Qwen2.5-VL) in the batched engine.

Each token has three positions (time, row, column), each rotating its own section of the
rotary frequencies. Text has all three equal. An image of h x w feature rows starting where
the next text position would be, `st`, has row k = (r, c) at (st, st + r, st + c); the text
after it resumes at st + max(h, w), not at st + h * w. So past its first image a sequence's
text positions are its token index plus a *delta* (the sum of max(h, w) - h * w over its
images so far: never positive), and the delta is per sequence.

The language model stays mlx-lm's class over its own weights (model/vision.py), its
attentions' RoPE replaced by `GridRope`, which rotates by the positions its model computed
for the forward pass. Positions are computed from what the engine already has:

- a token's index is its cache's RoPE offset (mlx-lm's per-row `offset`, which counts what a
  row kept: speculative decoding's holes included) plus its place in the step;
- an image row's (virtual id's) grid offsets and, on an image's last row, the delta it adds
  come from the image rows (`ImageRows.layout`), written when the image was placed;
- the sequence's delta before the step is kept in the cache itself, as one more layer
  (`make_cache`): a plain KVCache whose "keys" are each token's delta after it. mlx-lm's
  batched caches right-align their rows (left padding, zeros: a row with no history reads
  0), so a row's current delta is its cache's last entry (speculative decoding's rejected
  tokens are text: they hold the same delta). mlx-lm's batching, extraction, trimming, the
  prompt cache and its disk tier carry that layer as they carry the others, so a cached
  prefix brings its delta along and a trimmed one drops what it trimmed.
"""

from __future__ import annotations

import importlib
from typing import Any

import mlx.core as mx

# mlx's and mlx-lm's classes, untyped: subclassed and called as Any.
Module: Any = importlib.import_module("mlx.nn").Module
KVCache: Any = importlib.import_module("mlx_lm.models.cache").KVCache


class GridRope(Module):  # type: ignore[misc]
    """Rotates queries and keys by the positions of the current forward pass (`cos`,
    `sin`: [batch, 1, tokens, head_dim], set by `GridPositions.__call__`), as Qwen-VL's
    rotate-half RoPE does; mlx-lm's offset argument is ignored (it is in the positions).
    It also holds the pass's deepstack additions (`DeepstackLayer`)."""

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "_angles", None)
        object.__setattr__(self, "deep", [])

    def set(self, cos: Any, sin: Any, deep: list[Any]) -> None:
        object.__setattr__(self, "_angles", (cos, sin))
        object.__setattr__(self, "deep", deep)

    def __call__(self, x: Any, offset: Any = 0) -> Any:
        cos, sin = self._angles
        half = x.shape[-1] // 2
        rotated = mx.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin


class GridPositions:
    """Mixed into the language model's class (its weights untouched): computes each
    token's three positions before the forward pass and keeps each sequence's delta in
    the cache's last layer."""

    _triode_rope: GridRope
    _triode_rotary: Any      # mlx-vlm's rotary embedding: positions → (cos, sin)
    _triode_like: Any        # an empty array of the activations' dtype (cos and sin's)
    _triode_rows: Any        # the image rows (model/vision.py)
    layers: Any

    def make_cache(self) -> list[Any]:
        return [KVCache() for _ in range(len(self.layers) + 1)]

    def __call__(self, inputs: Any, cache: Any = None, input_embeddings: Any = None) -> Any:
        track = None
        if cache is not None:
            *cache, track = cache
        positions, deltas = self.positions(inputs, None if cache is None else cache[0],
                                           track)
        cos, sin = self._triode_rotary(self._triode_like, positions)
        self._triode_rope.set(cos[:, None], sin[:, None], self._triode_rows.deep_of(inputs))
        if track is not None:
            kept = deltas[:, None, :, None].astype(mx.float32)
            track.update_and_fetch(kept, kept)
        return super().__call__(inputs, cache=cache,  # type: ignore[misc]
                                input_embeddings=input_embeddings)

    def positions(self, inputs: Any, first: Any, track: Any) -> tuple[Any, Any]:
        """[3, batch, tokens] positions of `inputs` and each token's delta after it."""
        batch, length = inputs.shape
        offset = first.offset if first is not None else 0
        start = mx.broadcast_to(mx.array(offset, dtype=mx.int32).reshape(-1), (batch,))
        index = start[:, None] + mx.arange(length, dtype=mx.int32)[None]
        before = current_delta(track, batch)
        grid, ends = self._triode_rows.layout_of(inputs)
        after = before[:, None] + mx.cumsum(ends, axis=1)
        base = index + after - ends
        positions = (base[..., None] + grid).transpose(2, 0, 1)
        return positions, mx.where(index >= 0, after, 0)   # padding keeps 0


class DeepstackLayer:
    """Mixed into Qwen3-VL's first decoder layers: layer i adds, at image rows, the vision
    tower's i-th deepstack features (kept with the image's rows) to its output, as
    mlx-vlm's Qwen3-VL language model does."""

    _triode_level: int
    _triode_rope: GridRope

    def __call__(self, x: Any, mask: Any = None, cache: Any = None) -> Any:
        h = super().__call__(x, mask, cache)  # type: ignore[misc]
        deep = self._triode_rope.deep
        if self._triode_level < len(deep):
            h = h + deep[self._triode_level].astype(h.dtype)
        return h


def current_delta(track: Any, batch: int) -> Any:
    """Each row's delta so far: the last entry of its cache's position layer (one read a
    step, whatever the context's length)."""
    keys = None if track is None else track.keys
    if keys is None:
        return mx.zeros((batch,), dtype=mx.int32)
    size = getattr(track, "_idx", None)   # a batch's shared end; a lone cache's offset
    size = track.offset if size is None else size
    if size == 0:
        return mx.zeros((batch,), dtype=mx.int32)
    return keys[:, 0, size - 1, 0].astype(mx.int32)


def install(model: Any, rotary: Any, rows: Any, dtype: Any, deepstack: int = 0) -> None:
    """Makes `model` (mlx-lm's class of the language model) compute M-RoPE positions with
    `rotary` (mlx-vlm's, whose frequency layout is the model's) in `dtype`: its class gets
    `GridPositions` mixed in and every attention's RoPE becomes one shared `GridRope`; its
    first `deepstack` layers add the images' deepstack features (Qwen3-VL)."""
    rope = GridRope()
    for layer in model.layers:
        layer.self_attn.rope = rope
    for level, layer in enumerate(model.layers[:deepstack]):
        layer.__class__ = type(f"Deepstack{type(layer).__name__}",
                               (DeepstackLayer, type(layer)), {})
        object.__setattr__(layer, "_triode_level", level)
        object.__setattr__(layer, "_triode_rope", rope)
    model.__class__ = type(f"Grid{type(model).__name__}", (GridPositions, type(model)), {})
    for name, value in (("_triode_rope", rope), ("_triode_rotary", rotary),
                        ("_triode_rows", rows), ("_triode_like", mx.zeros((0,), dtype))):
        object.__setattr__(model, name, value)
