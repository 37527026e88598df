#!/usr/bin/env python
"""KV cache bytes per token and sequences per GiB, plain and with `--kv-bits 8` / `4`.

Measured, not computed: a prompt of `--tokens` tokens runs through each model with mlx-lm's
plain batched cache and with triode's batched quantized cache (src/triode/model/kvquant.py),
and the bytes the caches hold for those tokens are divided by the token count. Models: the
bundled one (float32, as it ships) and random-weight models shaped like the benchmarks' 76M
model and Qwen3-0.6B, in float32 and in bfloat16 (how real checkpoints ship).

    .venv/bin/python bench/kv_memory.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput as tp  # noqa: E402

GIB = 1 << 30


def cache_bytes_per_token(model, tokens: int, bits: int) -> float:
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache

    from triode.model.kvquant import BatchQuantizedKVCache

    layers = len(model.layers)
    cache = ([BatchQuantizedKVCache([0], bits=bits) for _ in range(layers)] if bits
             else [BatchKVCache([0]) for _ in range(layers)])
    model(mx.array([list(range(1, tokens + 1))]), cache=cache)
    total = 0
    for c in cache:
        parts = (*c.keys, *c.values) if bits else (c.keys, c.values)
        total += sum(x[..., :c._idx, :].nbytes for x in parts)
    return total / tokens


def main(argv: list[str] | None = None) -> int:
    import mlx.core as mx
    from mlx_lm.models.qwen3 import Model, ModelArgs

    from triode.model.loading import BUNDLED_PATH, load

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--context", type=int, default=4096,
                   help="sequence length for the sequences-per-GiB column")
    args = p.parse_args(argv)
    models = [("bundled", "float32", load(str(BUNDLED_PATH))[0])]
    config = json.loads((BUNDLED_PATH / "config.json").read_text())
    for name, size in tp.RANDOM_SIZES.items():
        for dtype in ("float32", "bfloat16"):
            model = Model(ModelArgs.from_dict({**config, **size}))
            if dtype == "bfloat16":
                model.set_dtype(mx.bfloat16)
            mx.eval(model.parameters())
            models.append((name, dtype, model))
    print(f"| model | dtype | plain bytes/token | 8-bit | 4-bit | 8-bit gain | 4-bit gain | "
          f"sequences of {args.context:,} tokens per GiB: plain / 8-bit / 4-bit |")
    print("|---|---|---|---|---|---|---|---|")
    for name, dtype, model in models:
        plain, q8, q4 = (cache_bytes_per_token(model, args.tokens, b) for b in (0, 8, 4))
        per = [GIB / (b * args.context) for b in (plain, q8, q4)]
        print(f"| {name} | {dtype} | {plain:,.0f} | {q8:,.0f} | {q4:,.0f} | "
              f"{plain / q8:.2f}x | {plain / q4:.2f}x | "
              f"{per[0]:.1f} / {per[1]:.1f} / {per[2]:.1f} |")
        tp.log(f"{name} {dtype} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
