#!/usr/bin/env python
"""What a forward pass over a decode batch costs by its shape (issue 31): rows x width,
where width is 1 for a plain step and 1 + k for a speculative step verifying k drafted
tokens a row. Each cell is the median time of a synchronous pass (the forward pass, the
log-softmax and the argmax a greedy step samples with, evaluated), over a KV cache of
--context tokens a row, divided by the plain step of the same rows in the same run. No
pipelining, no bookkeeping: the ceiling of what verification can cost, which everything
around it (bench/speculative_profile.py) adds to.

A speculative step pays when its tokens per row exceed its cost ratio here (times the
plain step's pipelining advantage): with all-accepted drafts of k tokens, 1 + k tokens for
the cell's ratio.

    .venv/bin/python bench/verify_cost.py                  # bundled and 76M
    .venv/bin/python bench/verify_cost.py --models bundled --rows 1,8 --widths 1,3,5,9
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import RANDOM_SIZES, create_random_model, log  # noqa: E402

from triode.model import blas  # noqa: E402

blas.preload_blas()


def pass_ms(model, rows: int, widths: list[int], context: int, repeats: int
            ) -> dict[int, float]:
    """Median milliseconds of a pass of each width, the widths interleaved pass by pass
    (so that the machine's drift falls on all of them alike)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    caches, inputs = {}, {}
    for w in widths:
        caches[w] = make_prompt_cache(model)
        mx.eval(model(mx.array([list(range(1, context + 1))] * rows), cache=caches[w]))
        inputs[w] = mx.array([list(range(1, w + 1))] * rows)
    times: dict[int, list[float]] = {w: [] for w in widths}
    for _ in range(repeats):
        for w in widths:
            start = time.perf_counter()
            logits = model(inputs[w], cache=caches[w])
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            mx.argmax(logprobs, axis=-1).tolist()
            times[w].append(time.perf_counter() - start)
            for c in caches[w]:
                c.trim(w)
    return {w: statistics.median(t) * 1e3 for w, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="bundled,random")
    parser.add_argument("--rows", default="1,8")
    parser.add_argument("--widths", default="1,2,3,5,9")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=60)
    args = parser.parse_args()

    from triode.model.loading import BUNDLED_PATH, load

    widths = sorted({1, *(int(w) for w in args.widths.split(","))})
    print("| model | rows | plain step ms | " + " | ".join(f"width {w}" for w in widths)
          + " |")
    print("|---|---:|---:|" + "---:|" * len(widths))
    with tempfile.TemporaryDirectory() as scratch:
        for name in filter(None, args.models.split(",")):
            path = BUNDLED_PATH if name == "bundled" else create_random_model(
                Path(scratch) / name, RANDOM_SIZES[name])
            model, _ = load(str(path))
            blas.set_threads(blas.auto_threads(getattr(model.args, "hidden_size", None)))
            repeats = args.repeats if name == "bundled" else max(5, args.repeats // 4)
            for rows in (int(r) for r in args.rows.split(",")):
                pass_ms(model, rows, widths, args.context, 2)   # warm up
                cells = pass_ms(model, rows, widths, args.context, repeats)
                plain = cells[1]
                log(f"{name} rows {rows}: " + ", ".join(f"{w}: {ms:.2f} ms"
                                                       for w, ms in cells.items()))
                print(f"| {name} | {rows} | {plain:.2f} | "
                      + " | ".join(f"{cells[w] / plain:.2f}x" for w in widths) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
