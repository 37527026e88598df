"""mlx-lm's qwen3 with sliding-window attention in every layer: the architecture of the
training script's `agent` stage (training/tiny/train.py --stage agent).

That stage's `config.json` names this file as `model_file`, so `mlx_lm.load(...,
trust_remote_code=True)` builds the model from it (triode passes that flag for the bundled
model only; `mlx_lm.server` needs `--trust-remote-code`). The weights are qwen3's, unchanged; what differs is that each
token attends to the last `sliding_window` positions only, in training and in serving alike.
A prompt of any length therefore looks, to every layer, like the short chats the model was
trained on, and the KV cache of a sequence is bounded by the window (mlx-lm's
`RotatingKVCache`, batched as `BatchRotatingKVCache`).
"""

# No `from __future__ import annotations`: mlx-lm execs this file as a module that is not in
# sys.modules, where dataclasses cannot resolve string annotations.
from dataclasses import dataclass
from typing import Any

from mlx_lm.models import qwen3
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import RotatingKVCache


@dataclass
class ModelArgs(qwen3.ModelArgs):
    sliding_window: int = 1024


class SlidingQwen3Model(qwen3.Qwen3Model):
    def __call__(self, inputs: Any, cache: Any = None, input_embeddings: Any = None) -> Any:
        h = input_embeddings if input_embeddings is not None else self.embed_tokens(inputs)
        if cache is None:
            cache = [None] * len(self.layers)
        window: int = getattr(self.args, "sliding_window")
        mask = create_attention_mask(h, cache[0], window_size=window)
        for layer, c in zip(self.layers, cache):
            h = layer(h, mask, c)
        return self.norm(h)


class Model(qwen3.Model):
    def __init__(self, args: ModelArgs):
        super().__init__(args)
        self.model = SlidingQwen3Model(args)

    def make_cache(self) -> list[Any]:
        window: int = getattr(self.args, "sliding_window")
        return [RotatingKVCache(max_size=window)  # type: ignore[no-untyped-call]
                for _ in self.layers]
