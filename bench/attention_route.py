#!/usr/bin/env python
"""Where a batched decode step should leave MLX for model/cpu_attention.py's MKL softmax:
SmolLM2-135M-Instruct in float32, in process, mlx-lm's BatchGenerator with B sequences of
a given context, ms per decode step with MLX's own attention and with the MKL softmax
forced for every call, alternated (MLX, MKL, then MKL, MLX, ...), medians.

    .venv/bin/python bench/attention_route.py 8 300        # batch, keys per sequence
    .venv/bin/python bench/attention_route.py 32 250 --steps 20 --repeat 3
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
from mlx_lm.generate import BatchGenerator  # noqa: E402
from mlx_lm.sample_utils import make_sampler  # noqa: E402

from triode.model import cpu_attention, gguf, precision  # noqa: E402
from triode.model.sources import shipped_file  # noqa: E402


def step_ms(model, batch: int, context: int, steps: int, mkl: bool) -> float:
    generator = BatchGenerator(model, stop_tokens=[], completion_batch_size=batch,
                               prefill_batch_size=min(batch, 8),
                               stream=mx.new_stream(mx.default_device()))
    saved = cpu_attention.MIN_DECODE_KEYS, cpu_attention.MIN_ROW_SCORES
    if mkl:   # every decode call through the MKL softmax
        cpu_attention.install()
        cpu_attention.MIN_DECODE_KEYS = cpu_attention.MIN_ROW_SCORES = 0
    try:
        prompts = [[(7 * i + 13 * b) % 30000 + 100 for i in range(context)]
                   for b in range(batch)]
        generator.insert(prompts, [10 * steps + 300] * batch,
                         samplers=[make_sampler(temp=0.0)] * batch)
        while len(generator.next()[1]) < batch:   # prefill until every row decodes
            pass
        began = time.perf_counter()
        for _ in range(steps):
            generator.next()
        return (time.perf_counter() - began) / steps * 1e3
    finally:
        cpu_attention.MIN_DECODE_KEYS, cpu_attention.MIN_ROW_SCORES = saved
        cpu_attention.uninstall()
        generator.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("batch", type=int)
    parser.add_argument("context", type=int)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    blas.set_threads(0)
    model, _ = gguf.build_model(gguf.read(shipped_file("smollm2")), keep_float=True)
    precision.to_float32(model)
    times: dict[bool, list[float]] = {False: [], True: []}
    for repeat in range(args.repeat):
        for mkl in ((False, True) if repeat % 2 == 0 else (True, False)):
            times[mkl].append(step_ms(model, args.batch, args.context, args.steps, mkl))
            print(f"run {repeat + 1}, {'MKL' if mkl else 'MLX'}: {times[mkl][-1]:.1f} ms/step",
                  file=sys.stderr, flush=True)
    mlx, mkl = (statistics.median(times[k]) for k in (False, True))
    print(f"| {args.batch} | {args.context} | {mlx:.1f} | {mkl:.1f} | {mkl / mlx:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
