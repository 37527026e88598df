#!/usr/bin/env python
"""What serving a K-quant GGUF as MLX affine quantization costs, on the real model.

SmolLM2-135M-Instruct's Q4_1 file is requantized by llama.cpp's own `llama-quantize` (built by
bench/llama_cpp.py) to Q4_K_M and Q6_K. Each file is loaded by triode twice: its weights
dequantized to float32 (exactly the values the file holds: the reference), and requantized to
MLX affine with REQUANTIZED_BITS (what triode runs where float32 does not fit, and on Metal).
Over a fixed English text the two models' next-token distributions are compared: mean KL
divergence (nats), top-1 agreement, and the perplexity of each.

    .venv/bin/python bench/requantize.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import llama_cpp  # noqa: E402

TEXT = (
    "The history of the lighthouse begins in the ancient world, where fires were lit on "
    "hilltops to guide sailors home. Over the centuries these fires became towers of stone, "
    "and the towers gained lenses that could throw a beam of light far across the water. "
    "Keepers lived in small houses at the foot of each tower, trimming wicks, polishing glass "
    "and writing the weather into thick logbooks. Today most lighthouses run on their own, "
    "powered by electricity and watched from offices many miles away, yet people still visit "
    "them to climb the narrow stairs and look out at the sea. In the kitchen, bread rises "
    "slowly when the dough is kept warm; a baker folds it, waits, and folds it again, until "
    "the loaf holds its shape. Numbers tell their own stories: 12 eggs, 3 cups of flour, "
    "450 grams of butter, and an oven at 220 degrees for 35 minutes. ") * 3


def requantized(source: Path, kind: str) -> Path:
    out = llama_cpp.cache_dir() / f"{source.stem}.{kind}.gguf"
    if not out.exists():
        quantize = llama_cpp.server_binary().with_name("llama-quantize")
        subprocess.run([str(quantize), "--allow-requantize", str(source), str(out), kind],
                       check=True, capture_output=True)
    return out


def compare(path: Path) -> dict[str, float]:
    import mlx.core as mx

    from triode.model import gguf

    stored = gguf.read(path)
    exact, _ = gguf.build_model(stored, keep_float=True)
    mlx_affine, _ = gguf.build_model(stored, keep_float=False)
    tokenizer = gguf.build_tokenizer(stored)
    ids = mx.array([tokenizer.encode(TEXT, add_special_tokens=False)[:1024]])

    def logprobs(model):
        out = model(ids[:, :-1]).astype(mx.float32)
        return out - mx.logsumexp(out, axis=-1, keepdims=True)

    p, q = logprobs(exact), logprobs(mlx_affine)
    targets = ids[:, 1:]
    kl = mx.sum(mx.exp(p) * (p - q), axis=-1).mean()
    agree = (mx.argmax(p, axis=-1) == mx.argmax(q, axis=-1)).mean()

    def perplexity(lp):
        return mx.exp(-mx.take_along_axis(lp, targets[..., None], axis=-1).mean())

    return {"tokens": int(targets.size), "types": sorted(stored.quantized_types()),
            "kl": float(kl), "top1": float(agree), "ppl_exact": float(perplexity(p)),
            "ppl_requantized": float(perplexity(q))}


def main() -> int:
    from triode.model import blas
    from triode.model.sources import shipped_file

    blas.preload_blas("auto")
    source = shipped_file("smollm2")
    print("| file | tensor types | mean KL (nats) | top-1 agreement | perplexity, file's "
          "values | perplexity, MLX affine |\n|---|---|---:|---:|---:|---:|")
    for kind in ("Q4_K_M", "Q6_K"):
        row = compare(requantized(source, kind))
        print(f"| SmolLM2 {kind} | {', '.join(row['types'])} | {row['kl']:.4f} | "
              f"{row['top1']:.1%} | {row['ppl_exact']:.2f} | {row['ppl_requantized']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
