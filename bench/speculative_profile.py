#!/usr/bin/env python
"""Where a speculative step's time goes, against a plain step's (issue 31).

Runs the server's generation path without HTTP: the real `ModelActor` and its engine thread
(`Engine`, mlx-lm's `BatchGenerator`, the streaming detokenizer, the per-step hand-off to the
trio thread) with one consumer reading each request's outputs, one request at a time (or
`--streams C` at a time, each stream taking the next prompt as its request ends), greedy,
`--speculative off` and `ngram` alternated in one process. Every engine iteration (one
`generator.next()` and the engine's work on its tokens, up to the next exchange) is classed by
what the decode batch did in it: a plain step, or a speculative step that verified drafts.
Iterations that prefilled are left out.

Sections of an iteration (engine thread; wall clock, `time.perf_counter`):
    lookup      drafting: the n-gram lookups and the plan (speculative batches only)
    graph       building the forward pass (the model's Python code; MLX evaluates lazily)
    forward     waiting for MLX: the forward pass and the sampling it feeds. A plain step
                waits for the pass it started one step earlier (pipelined); a speculative
                step waits for its own
    cache       HoleyKVCache's bookkeeping: keep, holes, compaction, masks, filter
    accept      sampling's host side and acceptance (speculative steps)
    responses   the batch's per-token Response objects, stop matching, finished rows' caches
    detokenize  the engine's streaming detokenizer, per token
    engine      the rest of the engine loop: StepOutputs, the pacer, its bookkeeping
    handoff     the exchange with the trio thread (posting outputs, taking commands)
and, in the trio thread, concurrently (it competes for the interpreter with the engine):
    actor       the model actor's processing of the posted step
    consumer    the reader of the outputs (one task, as a supervisor reads them)

    .venv/bin/python bench/speculative_profile.py                     # bundled and 76M
    .venv/bin/python bench/speculative_profile.py --models bundled --runs 3
    .venv/bin/python bench/speculative_profile.py --models bundled --streams 8   # batched

Prompts: `Reply with:` and 60-90 words (the long-copy task), the same in every run. The
Markdown table (milliseconds per iteration: medians over all runs' iterations) goes to stdout.
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import RANDOM_SIZES, WORDS, create_random_model, log  # noqa: E402

from triode.model import blas  # noqa: E402

blas.preload_blas()

SECTIONS = ("lookup", "graph", "forward", "cache", "accept", "responses", "detokenize",
            "engine", "handoff")
TRIO_SECTIONS = ("actor", "consumer")


class Profile:
    """Section times of the current engine iteration, and every finished iteration's."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.trio: dict[str, float] = defaultdict(float)
        self.iterations: list[tuple[str, float, int, dict[str, float]]] = []
        self.enabled = False
        self.rows = 1   # the batch width whose iterations count (--streams)

    def add(self, section: str, seconds: float) -> None:
        self.current[section] += seconds

    def timed(self, section: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[section] += time.perf_counter() - start
        return wrapper


PROFILE = Profile()


def instrument() -> None:
    """Wraps the functions each section is made of (process-wide, once)."""
    import mlx.core as mx
    mlx_generate = importlib.import_module("mlx_lm.generate")
    from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, NaiveStreamingDetokenizer

    from triode.model import speculative as spec

    p = PROFILE
    spec.NgramIndex.propose = p.timed("lookup", spec.NgramIndex.propose)
    spec.plan = p.timed("lookup", spec.plan)
    for name in ("keep", "holes", "compact", "make_mask", "filter", "extend", "extract"):
        if name in vars(spec.HoleyKVCache):
            setattr(spec.HoleyKVCache, name, p.timed("cache", getattr(spec.HoleyKVCache, name)))
    if hasattr(spec, "Holes"):
        for name, fn in list(vars(spec.Holes).items()):
            if callable(fn) and not name.startswith("__"):
                setattr(spec.Holes, name, p.timed("cache", fn))
    for cls in (BPEStreamingDetokenizer, NaiveStreamingDetokenizer):
        cls.add_token = p.timed("detokenize", cls.add_token)
        cls.finalize = p.timed("detokenize", cls.finalize)

    # The forward pass: its graph is built in the model's call (TimedModel); a plain step
    # waits where mlx-lm's `_step` evaluates, a speculative one where it first needs tokens
    # as Python ints: the previous step's sampled ones (when that step was a pipelined plain
    # one, its pass is still running) and its own samples. Those waits are made explicit
    # (`mx.eval` just before the same conversion would wait anyway) and counted as forward.
    plain_step = mlx_generate.GenerationBatch._step

    def step(self: Any) -> Any:
        start = time.perf_counter()
        graph = p.current["graph"]
        try:
            return plain_step(self)
        finally:
            p.current["forward"] += time.perf_counter() - start - (p.current["graph"] - graph)
    mlx_generate.GenerationBatch._step = step

    def waited(fn: Callable[..., Any], arrays: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any) -> Any:
            start = time.perf_counter()
            mx.eval(arrays(self, *args))
            p.current["forward"] += time.perf_counter() - start
            return fn(self, *args)
        return wrapper

    batch = spec.SpeculativeBatch
    batch._sample = waited(p.timed("accept", batch._sample), lambda self, at, *_: at)
    batch._speculative_next = waited(batch._speculative_next,
                                     lambda self, *_: self._next_tokens)


class TimedModel:
    """The batch's model, its call timed as graph building."""

    def __init__(self, model: Any):
        self._model = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._model(*args, **kwargs)
        finally:
            PROFILE.current["graph"] += time.perf_counter() - start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def long_copy_prompts(count: int) -> list[str]:
    rng = random.Random(31)
    return ["Reply with: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 90)))
            for _ in range(count)]


async def run_once(path: str, speculative: str, prompts: list[str], max_tokens: int,
                   streams: int = 1
                   ) -> tuple[list[list[int]], list[tuple[str, float, int, dict[str, float]]]]:
    """The prompts through one actor, `streams` requests at a time (each stream takes the
    next prompt as its request finishes); their tokens in prompt order, and the iterations."""
    import trio

    from triode.actors.model import ModelActor
    from triode.model.engine import EngineOptions
    from triode.model.request import GenerationRequest, Sampling

    p = PROFILE
    p.iterations = []
    actor = ModelActor(EngineOptions(model=path, parallel=streams, speculative=speculative),
                       max_queue=max(8, streams), engine_factory=ProfiledEngine)
    outputs: list[list[int]] = [[] for _ in prompts]
    waiting = list(enumerate(prompts))

    async def stream(handle: Any) -> None:
        while waiting:
            index, text = waiting.pop(0)
            rendered = await handle.render([{"role": "user", "content": text}])
            request = GenerationRequest(rendered.tokens, max_tokens,
                                        Sampling(temperature=0.0))
            async with handle.generate(request) as adm:
                async for out in adm.outputs:
                    start = time.perf_counter()
                    outputs[index].append(out.token)
                    p.trio["consumer"] += time.perf_counter() - start
                    if out.finish_reason is not None:
                        break

    async with trio.open_nursery() as nursery:
        handle = await nursery.start(actor.run)
        p.enabled = True
        async with trio.open_nursery() as streams_nursery:
            for _ in range(streams):
                streams_nursery.start_soon(stream, handle)
        p.enabled = False
        nursery.cancel_scope.cancel()
    return outputs, p.iterations


class ProfiledEngine:
    """`Engine`, with its hand-off to the host and its generator's batch instrumented."""

    def __init__(self, options: Any):
        from triode.model.engine import Engine

        self._engine = Engine(options)

    def steps(self, started: Any) -> Any:
        mlx_generate = importlib.import_module("mlx_lm.generate")

        p = PROFILE
        original_next = mlx_generate.BatchGenerator.next
        state: dict[str, Any] = {"generator": None, "began": None}

        def next_(generator: Any) -> Any:
            state["generator"] = generator
            batch = generator._generation_batch
            if not isinstance(batch.model, TimedModel):
                batch.model = TimedModel(batch.model)
            state["counts"] = dict(getattr(batch, "counts", {}))
            state["prompt"] = generator._counters.prompt_tokens
            state["tokens"] = 0
            state["rows"] = len(batch)
            start = time.perf_counter()
            result = original_next(generator)
            state["next"] = time.perf_counter() - start
            state["tokens"] = len(result[1])
            return result

        def before_handoff() -> None:
            now = time.perf_counter()
            generator, began = state["generator"], state["began"]
            if began is not None and generator is not None and p.enabled:
                batch = generator._generation_batch
                counts = getattr(batch, "counts", None)
                kind = "plain-engine"
                if counts is not None:
                    before = state["counts"]
                    kind = "plain"
                    if counts["speculative"] > before["speculative"]:
                        # k: the drafted tokens a row verified (one row: its draft)
                        drafted = (counts["drafted"] - before["drafted"]) / max(1, state["rows"])
                        kind = "speculative k<=4" if drafted <= 4 else "speculative k>4"
                if (generator._counters.prompt_tokens == state["prompt"] and state["tokens"]
                        and state["rows"] == p.rows):
                    sections = dict(p.current)
                    inner = sum(sections.get(s, 0.0) for s in
                                ("lookup", "graph", "forward", "cache", "accept"))
                    sections["responses"] = state["next"] - inner
                    sections["engine"] = (now - began - state["next"]
                                          - sections.get("detokenize", 0.0))
                    sections["total"] = now - began
                    p.iterations.append((kind, state["tokens"] / state["rows"], 0, sections))

        mlx_generate.BatchGenerator.next = next_
        inner = self._engine.steps(started)
        commands = None
        try:
            while True:
                try:
                    step = inner.send(commands)
                except StopIteration:
                    return
                if step is None:   # a piece of the load
                    commands = yield None
                    continue
                before_handoff()
                start = time.perf_counter()
                commands = yield step   # the engine host steps other engines meanwhile
                handoff = time.perf_counter() - start
                p.current = defaultdict(float)
                p.current["handoff"] = handoff
                state["began"] = time.perf_counter() - handoff
        finally:
            inner.close()
            mlx_generate.BatchGenerator.next = original_next


def patch_actor() -> None:
    from triode.actors import model as actor_module

    step = actor_module.ModelActor._step

    def timed_step(self: Any, msg: Any) -> None:
        start = time.perf_counter()
        try:
            step(self, msg)
        finally:
            PROFILE.trio["actor"] += time.perf_counter() - start
    actor_module.ModelActor._step = timed_step


def summarize(iterations: list[tuple[str, float, int, dict[str, float]]]
              ) -> dict[str, tuple[int, float, dict[str, float]]]:
    """Per kind: iterations, tokens per iteration, each section's median seconds (and the
    median iteration's total: the machine is shared, and a mean would be its worst moments)."""
    out: dict[str, tuple[int, float, dict[str, float]]] = {}
    for kind in ("plain-engine", "plain", "speculative k<=4", "speculative k>4"):
        rows = [it for it in iterations if it[0] == kind]
        if not rows:
            continue
        medians = {s: statistics.median(r[3].get(s, 0.0) for r in rows)
                   for s in (*SECTIONS, "total")}
        out[kind] = (len(rows), sum(r[1] for r in rows) / len(rows), medians)
    return out


def main() -> int:
    import trio

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="bundled,random")
    parser.add_argument("--runs", type=int, default=3, help="runs of each way, alternated")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--streams", type=int, default=1,
                        help="requests decoded together (at least 3 prompts a stream); only "
                        "iterations of a batch this wide count")
    args = parser.parse_args()

    from triode.model.loading import BUNDLED_PATH

    instrument()
    patch_actor()
    prompts = long_copy_prompts(max(args.prompts, 3 * args.streams))
    print("| model | step | iterations | tokens / step | total ms | "
          + " | ".join(SECTIONS) + " | trio thread ms / step (actor + consumer) |")
    print("|---|---|---:|---:|---:|" + "---:|" * len(SECTIONS) + "---:|")
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models.split(","):
            if name == "bundled":
                path = str(BUNDLED_PATH)
            else:
                log(f"building the {name} model")
                path = str(create_random_model(Path(scratch) / name, RANDOM_SIZES[name]))
            where = f", C = {args.streams}" if args.streams > 1 else ""
            collected: dict[str, list[Any]] = {"off": [], "ngram": []}
            trio_time = {"off": [0.0, 0], "ngram": [0.0, 0]}
            tokens: dict[str, list[list[int]]] = {}
            trio.run(run_once, path, "off", prompts[:1], 8)   # warm up
            PROFILE.rows = args.streams
            for run in range(args.runs):
                for way in ("off", "ngram"):
                    PROFILE.trio = defaultdict(float)
                    out, iterations = trio.run(run_once, path, way, prompts, args.max_tokens,
                                               args.streams)
                    collected[way] += iterations
                    trio_time[way][0] += sum(PROFILE.trio.values())
                    trio_time[way][1] += len(iterations)
                    tokens[way] = out
                    log(f"{name} {way} run {run + 1}: {len(iterations)} iterations, "
                        f"{sum(len(t) for t in out)} tokens")
            same = tokens["off"] == tokens["ngram"]
            log(f"{name}: same tokens both ways: {same}")
            for way in ("off", "ngram"):
                per_trio = trio_time[way][0] / max(1, trio_time[way][1]) * 1e3
                for kind, (count, per_step, means) in summarize(collected[way]).items():
                    label = {"plain-engine": "plain (`--speculative off`)",
                             "plain": "plain (ngram batch, not drafting)",
                             "speculative k<=4": "speculative, k <= 4 drafted",
                             "speculative k>4": "speculative, k 5-8 drafted"}[kind]
                    print(f"| {name}{where} | {label} | {count} | {per_step:.2f} | "
                          f"{means['total'] * 1e3:.2f} | "
                          + " | ".join(f"{means[s] * 1e3:.2f}" for s in SECTIONS)
                          + f" | {per_trio:.2f} |")
            if not same:
                log("the two ways generated different tokens")
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
