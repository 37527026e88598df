#!/usr/bin/env python
"""The prompt cache on disk across a restart: a 20-turn agent chain with the server restarted
between turns 10 and 11, turn 11's time to first token with `--prompt-cache-dir` against
without it, and against turn 10 (issue 27).

The model is bench/throughput.py's `random-0.6b` (random weights shaped like Qwen3-0.6B:
hidden 1024, 28 layers, 16 query / 8 KV heads of 128, MLP 3072, the bundled tokenizer). The
chain is bench/agent.py's as bench/hybrid_cache.py runs it: an instruction prefix of
`--prefix-tokens` resent every turn in `instructions`, one short user message per turn,
`previous_response_id`, greedy, 16 output tokens. Both runs keep responses in
`--store sqlite:///...` (the chain must survive the restart) and restart the server after
turn 10 (SIGTERM, a fresh process on the same flags, the bench's warm-up request, then turn
11):

  A: with `--prompt-cache-dir` (a fresh directory): the shutdown writes the memory tier to
     disk and turn 11 loads its prefix back;
  B: without it: turn 11 prefills the whole chain again.

Per turn: time to the first streamed delta (TTFT: render, prefill, first decode step), the
input tokens and the cached ones. Targets: B11 / A11 >= 5, A11 / A10 <= 1.5. Markdown to
stdout, progress to stderr.

    .venv/bin/python bench/restart.py
    .venv/bin/python bench/restart.py --prefix-tokens 600 --turns 12
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent  # noqa: E402  (the chain's texts, the servers)
import hybrid_cache  # noqa: E402  (one streamed turn, the warm-up)
import throughput as tp  # noqa: E402  (the model and the HTTP client)

MODEL = "random-0.6b"


def turns(base_url: str, prefix: str, asks: list[str], previous: str | None,
          answer_tokens: int) -> list[dict]:
    import trio

    async def main() -> list[dict]:
        conn = tp.Connection(base_url)
        done: list[dict] = []
        last = previous
        for ask in asks:
            body = {"instructions": prefix, "input": ask, "max_output_tokens": answer_tokens}
            if last:
                body["previous_response_id"] = last
            done.append(await hybrid_cache.turn(conn, body))
            last = done[-1]["id"]
        return done

    return trio.run(main)


def run(name: str, model_dir: Path, flags: list[str], scratch: Path, prefix: str,
        asks: list[str], restart_after: int, answer_tokens: int) -> tuple[list[dict], float]:
    """The chain on one configuration, restarted after `restart_after` turns; also the
    seconds the first server took to stop (its shutdown writes the disk tier)."""
    flags = [*flags, "--store", f"sqlite:///{scratch / (name + '.db')}"]
    done: list[dict] = []
    stopped = 0.0
    for part, (start, end) in enumerate(((0, restart_after), (restart_after, len(asks)))):
        log_path = scratch / f"{name}-{part}.log"
        tp.log(f"{name}: server {part + 1}, turns {start + 1}-{end}")
        with agent.triode_with(model_dir, 2, flags, log_path) as url:
            hybrid_cache.warm(url)
            done += turns(url, prefix, asks[start:end], done[-1]["id"] if done else None,
                          answer_tokens)
            began = time.perf_counter()
        if not part:
            stopped = time.perf_counter() - began
    return done, stopped


def report(a: list[dict], b: list[dict], stops: dict[str, float], args: argparse.Namespace,
           params: int) -> str:
    ms = 1000.0
    n = args.restart_after   # turn n is the last before the restart, n + 1 the first after
    out = [f"model: {MODEL} ({params / 1e6:.0f}M parameters); command: bench/restart.py "
           f"{' '.join(sys.argv[1:])}", "",
           "| turn | input tokens | cached (A: disk tier) | TTFT ms (A) | cached (B: memory "
           "only) | TTFT ms (B) | B / A |", "|---|---|---|---|---|---|---|"]
    for i, (x, y) in enumerate(zip(a, b), 1):
        mark = " (after the restart)" if i == n + 1 else ""
        out.append(f"| {i}{mark} | {x['input']} | {x['cached']} | {x['ttft'] * ms:.0f} | "
                   f"{y['cached']} | {y['ttft'] * ms:.0f} | {y['ttft'] / x['ttft']:.1f} |")
    a10, a11, b11 = a[n - 1]["ttft"], a[n]["ttft"], b[n]["ttft"]
    later = statistics.median(t["ttft"] for t in a[n + 1:]) if len(a) > n + 1 else float("nan")
    before = statistics.median(t["ttft"] for t in a[1:n]) if n > 1 else a10
    out += ["",
            f"turn {n + 1} TTFT: {a11 * ms:.0f} ms with the disk tier, {b11 * ms:.0f} ms "
            f"without: B{n + 1} / A{n + 1} = {b11 / a11:.1f}x (target >= 5); turn {n}: "
            f"{a10 * ms:.0f} ms, A{n + 1} / A{n} = {a11 / a10:.2f} (target <= 1.5), against "
            f"the median of A's turns 2-{n} ({before * ms:.0f} ms) {a11 / before:.2f}; "
            f"A's turns {n + 2}-{len(a)} median {later * ms:.0f} ms; the first server's "
            f"shutdown took {stops['A']:.1f} s with the disk tier (it writes the memory tier), "
            f"{stops['B']:.1f} s without."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--restart-after", type=int, default=10)
    p.add_argument("--prefix-tokens", type=int, default=1500)
    p.add_argument("--answer-tokens", type=int, default=16)
    args = p.parse_args(argv)
    if not 0 < args.restart_after < args.turns:
        p.error("--restart-after must be between 1 and --turns - 1")
    with tempfile.TemporaryDirectory(prefix="triode-restart-bench-") as tmp:
        scratch = Path(tmp)
        ((_, model_dir),) = tp.resolve_models([MODEL], scratch)
        texts = agent.Texts(model_dir)
        prefix = "You are a careful assistant. " + texts.words_for(args.prefix_tokens)
        asks = [f"Reply with: {texts.words_for(4)}" for _ in range(args.turns)]
        runs: dict[str, list[dict]] = {}
        stops: dict[str, float] = {}
        for name, flags in (("A", ["--prompt-cache-dir", str(scratch / "kv")]), ("B", [])):
            runs[name], stops[name] = run(name, model_dir, flags, scratch, prefix, asks,
                                          args.restart_after, args.answer_tokens)
        print(report(runs["A"], runs["B"], stops, args, tp.parameter_count(model_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
