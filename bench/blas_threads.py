#!/usr/bin/env python
"""Does a second MKL thread make a model's decode steps faster? (the `--blas-threads 0` rule)

    .venv/bin/python bench/blas_threads.py                  # bundled and the 76M random model
    .venv/bin/python bench/blas_threads.py --model /path     # any mlx-lm model

For each batch size, times one batched decode step (context 16 tokens) with MKL capped at one
thread and at its default, the two settings interleaved step by step so that load from other
work on the machine falls on both alike; prints the medians and their ratio (>1: the default's
extra threads pay). What the rule cannot see from here, and why it leans to one thread, is the
other side: a worker that spins between steps takes CPU from the HTTP server (see
docs/architecture.md, BLAS).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS = 30
BATCHES = (1, 8, 32)


def step_timer(model):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    def timed(batch: int):
        cache = make_prompt_cache(model)
        mx.eval(model(mx.array([[5] * 16] * batch), cache=cache))
        token = mx.array([[7]] * batch)

        def step() -> float:
            start = time.perf_counter()
            mx.eval(model(token, cache=cache))
            return time.perf_counter() - start
        return step
    return timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None,
                        help="bundled, random, or a model path (repeatable; default both)")
    args = parser.parse_args()

    from triode.model import blas

    print(f"BLAS: {blas.preload_blas('auto')}")
    if blas.set_threads(0) is None:
        sys.exit("MKL is not in use here: nothing to compare")
    import throughput
    from mlx_lm import load

    with tempfile.TemporaryDirectory(prefix="triode-blas-") as scratch:
        for label, path in throughput.resolve_models(args.model or ["bundled", "random"],
                                                     Path(scratch)):
            model, _ = load(str(path), trust_remote_code=True)
            hidden = getattr(model.args, "hidden_size", None)
            default = blas.set_threads(0)
            print(f"\n### {label} ({throughput.parameter_count(path) / 1e6:.1f}M parameters, "
                  f"hidden size {hidden}; auto picks {blas.auto_threads(hidden) or 'the default'})")
            print(f"\n| batch | 1 thread ms/step | {default} threads ms/step | ratio |")
            print("|---|---|---|---|")
            timer = step_timer(model)
            for batch in BATCHES:
                one, many = timer(batch), timer(batch)
                times: dict[int, list[float]] = {1: [], default: []}
                for _ in range(STEPS):
                    for threads, step in ((1, one), (default, many)):
                        blas.set_threads(threads)
                        times[threads].append(step())
                t1, tn = statistics.median(times[1]), statistics.median(times[default])
                print(f"| {batch} | {t1 * 1e3:.2f} | {tn * 1e3:.2f} | {t1 / tn:.2f} |")
            blas.set_threads(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
