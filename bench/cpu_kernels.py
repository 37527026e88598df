#!/usr/bin/env python
"""Why triode runs a model in float32 with MKL's softmax on a CPU: SmolLM2-135M-Instruct in
process, the forward pass alone (no server), each way interleaved with the others.

    decode   ms per token, one sequence at a 300-token context: the Q4_1 file's weights as MLX
             reads them (4/8-bit), cast to bfloat16 and float16, dequantized to float32; MKL
             with 1 and 2 threads
    prefill  tokens/s of a 2,350-token prompt in float32 by chunk size, with MLX's own
             attention and with model/cpu_attention.py's
    attention  decode ms per token at a 2,350-token context, both attentions

    .venv/bin/python bench/cpu_kernels.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from triode.model import blas  # noqa: E402

blas.preload_blas("auto")

import mlx.core as mx  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from triode.model import cpu_attention, gguf, precision  # noqa: E402
from triode.model.sources import shipped_file  # noqa: E402

PROMPT = 2350


def decode_ms(model, context: int, steps: int = 40) -> float:
    cache = make_prompt_cache(model)
    for start in range(0, context, 512):
        mx.eval(model(mx.array([[(7 * i) % 30000 + 100 for i in range(start, min(context,
                                                                              start + 512))]]),
                      cache=cache))
    token = mx.array([[42]])
    for _ in range(3):
        mx.eval(model(token, cache=cache))
    began = time.perf_counter()
    for _ in range(steps):
        mx.eval(model(token, cache=cache))
    return (time.perf_counter() - began) / steps * 1e3


def prefill_rate(model, chunk: int) -> float:
    ids = mx.array([[(7 * i) % 30000 + 100 for i in range(PROMPT)]])
    cache = make_prompt_cache(model)
    began = time.perf_counter()
    for start in range(0, PROMPT, chunk):
        mx.eval(model(ids[:, start:start + chunk], cache=cache))
    return PROMPT / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    stored = gguf.read(shipped_file("smollm2"))

    def build(dtype: str):
        model, _ = gguf.build_model(stored, keep_float=False)
        if dtype == "float32":
            precision.to_float32(model)
        elif dtype != "native":
            precision.to_float32(model)
            model.set_dtype(getattr(mx, dtype))
        return model

    models = {d: build(d) for d in ("native", "bfloat16", "float16", "float32")}
    decode: dict[tuple[str, int], list[float]] = {}
    prefill: dict[tuple[str, int], list[float]] = {}
    attention: dict[str, list[float]] = {}
    for repeat in range(args.repeat):
        print(f"repeat {repeat + 1}", file=sys.stderr, flush=True)
        for threads in (1, 2):
            blas.set_threads(threads)
            for dtype, model in models.items():
                decode.setdefault((dtype, threads), []).append(decode_ms(model, 300, 20))
        blas.set_threads(0)
        for way in ("mlx", "mkl"):
            if way == "mkl":
                cpu_attention.install()
            for chunk in (256, 512, 1024, 2048):
                prefill.setdefault((way, chunk), []).append(
                    prefill_rate(models["float32"], chunk))
            attention.setdefault(way, []).append(decode_ms(models["float32"], PROMPT, 20))
            cpu_attention.uninstall()
    med = statistics.median
    print(f"Decode, ms per token at a 300-token context (median of {args.repeat}):\n")
    print("| weights | 1 MKL thread | 2 MKL threads |\n|---|---:|---:|")
    for dtype in models:
        print(f"| {dtype} | {med(decode[dtype, 1]):.1f} | {med(decode[dtype, 2]):.1f} |")
    print(f"\nPrefill of a {PROMPT}-token prompt, float32, tokens/s by chunk:\n")
    print("| attention | " + " | ".join(f"chunk {c}" for c in (256, 512, 1024, 2048)) +
          " |\n|---|" + "---:|" * 4)
    for way in ("mlx", "mkl"):
        print(f"| {'MLX' if way == 'mlx' else 'MKL softmax'} | " +
              " | ".join(f"{med(prefill[way, c]):.0f}" for c in (256, 512, 1024, 2048)) + " |")
    print(f"\nDecode at a {PROMPT}-token context, float32: MLX attention "
          f"{med(attention['mlx']):.1f} ms, MKL softmax {med(attention['mkl']):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
