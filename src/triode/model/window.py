"""`--attention-window N`: sliding-window attention for any model that uses a plain KV cache.

mlx-lm's attention layers build their mask from the layer's cache (`create_attention_mask(h,
cache)`), and a `RotatingKVCache` of N tokens masks to its own size: each token attends to the
last N positions, during prefill (chunks of any length) and decoding alike, batched as
`BatchRotatingKVCache`. So giving every layer a rotating cache is the whole change; the
weights and the model code are untouched.

Below N tokens this is the model exactly (the cache has not rotated). Past N, each layer sees
the last N positions only: RoPE scores depend on relative positions, so a model trained on
windows of N or more keeps attention spans it was trained on whatever the prompt's length.
That is what lets the bundled model (trained on chats of at most 4,096 tokens) answer Codex's
stock 21,700-token prompt (docs/clients.md has the measurements).
"""

from __future__ import annotations

from typing import Any


def window_caches(model: Any, window: int) -> list[Any]:
    """A new sequence's cache: one rotating cache of `window` tokens per layer. Refused
    (ValueError) for a model that makes its own caches: its layers need other kinds (it may
    already use sliding windows, or state-space layers), which a window cannot replace."""
    from mlx_lm.models.cache import RotatingKVCache

    if hasattr(model, "make_cache"):
        raise ValueError("--attention-window needs a model whose layers all use a plain KV "
                         "cache; this one makes its own caches (sliding windows, other "
                         "layer kinds or M-RoPE positions)")
    return [RotatingKVCache(max_size=window)   # type: ignore[no-untyped-call]
            for _ in range(len(model.layers))]
