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
    .venv/bin/python bench/verify_cost.py --models bundled --caches kv,batch,holey
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


CACHES = ("kv", "batch", "holey")


def make_cache(model, kind: str, rows: int, context: int):
    """A cache of `context` tokens a row: `kv` mlx-lm's per-sequence KVCache (every row alike,
    no mask), `batch` the BatchKVCache a decode batch has (its rows left-padded by 0, 4, 8,
    ... tokens, so attention takes a mask array), `holey` that cache as a speculative batch
    leaves it (HoleyKVCache, a quarter of its positions holes)."""
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

    from triode.model.speculative import HoleyKVCache

    prompt = mx.array([list(range(1, context + 1))] * rows)
    if kind == "kv":
        cache = make_prompt_cache(model)
    else:
        cache = [BatchKVCache([4 * i for i in range(rows)]) for _ in model.layers]
    mx.eval(model(prompt, cache=cache))
    if kind == "holey":
        kept = mx.random.uniform(shape=(rows, context), key=mx.random.key(0)) > 0.25
        cache = [HoleyKVCache.adopt(c) for c in cache]
        for c in cache:
            c.kept = kept
    return cache


def pass_ms(model, rows: int, widths: list[int], context: int, repeats: int,
            kinds: tuple[str, ...] = ("kv",)) -> dict[tuple[str, int], float]:
    """Median milliseconds of a pass of each width on each kind of cache, interleaved pass
    by pass (so that the machine's drift falls on all of them alike)."""
    import mlx.core as mx

    caches = {(k, w): make_cache(model, k, rows, context) for k in kinds for w in widths}
    inputs = {w: mx.array([list(range(1, w + 1))] * rows) for w in widths}
    times: dict[tuple[str, int], list[float]] = {cell: [] for cell in caches}
    for _ in range(repeats):
        for (kind, w), cache in caches.items():
            start = time.perf_counter()
            logits = model(inputs[w], cache=cache)
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            mx.argmax(logprobs, axis=-1).tolist()
            times[kind, w].append(time.perf_counter() - start)
            for c in cache:
                c.trim(w)   # KVCache's and BatchKVCache's own: drops the pass's positions
    return {cell: statistics.median(t) * 1e3 for cell, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="bundled,random")
    parser.add_argument("--rows", default="1,8")
    parser.add_argument("--widths", default="1,2,3,5,9")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--caches", default="kv",
                        help=f"kinds of KV cache, of {','.join(CACHES)}: every cell is divided "
                        "by the plain pass of the same rows on the first kind")
    args = parser.parse_args()

    from triode.model.loading import BUNDLED_PATH, load

    widths = sorted({1, *(int(w) for w in args.widths.split(","))})
    kinds = tuple(filter(None, args.caches.split(",")))
    if not kinds or set(kinds) - set(CACHES):
        parser.error(f"--caches takes kinds of {', '.join(CACHES)}")
    print("| model | rows | cache | plain step ms | "
          + " | ".join(f"width {w}" for w in widths) + " |")
    print("|---|---:|---|---:|" + "---:|" * len(widths))
    with tempfile.TemporaryDirectory() as scratch:
        for name in filter(None, args.models.split(",")):
            path = BUNDLED_PATH if name == "bundled" else create_random_model(
                Path(scratch) / name, RANDOM_SIZES[name])
            model, _ = load(str(path))
            blas.set_threads(blas.auto_threads(getattr(model.args, "hidden_size", None)))
            repeats = args.repeats if name == "bundled" else max(5, args.repeats // 4)
            for rows in (int(r) for r in args.rows.split(",")):
                pass_ms(model, rows, widths, args.context, 2, kinds)   # warm up
                cells = pass_ms(model, rows, widths, args.context, repeats, kinds)
                plain = cells[kinds[0], 1]
                for kind in kinds:
                    log(f"{name} rows {rows} {kind}: " + ", ".join(
                        f"{w}: {cells[kind, w]:.2f} ms" for w in widths))
                    print(f"| {name} | {rows} | {kind} | {cells[kind, 1]:.2f} | "
                          + " | ".join(f"{cells[kind, w] / plain:.2f}x" for w in widths)
                          + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
