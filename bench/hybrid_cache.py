#!/usr/bin/env python
"""The prompt cache on a hybrid-cache model: a 20-turn chain's per-turn prefill, cache on and
off, in one run (issue 26).

The model is a random-weight `qwen3_5` (tests/fixtures/hybrid.py: gated delta-net layers,
whose recurrent state cannot be trimmed, and every 4th layer full attention) shaped like a
0.6B model: hidden 1024, attention 16 query / 8 KV heads of 128, delta-net 16 key / 16 value
heads of 128, MLP 3072, with `--layers` of its 28 layers (default 8, 2 of them attention:
on 2 CPU cores the full depth prefills ~36 tokens/s and the run would take half an hour), the
bundled tokenizer's vocabulary with Qwen3's special tokens, and a Qwen3.5-style template
(its generation prompt opens `<think>`; earlier turns' reasoning is not rendered again).

The chain is bench/agent.py's: an instruction prefix of `--prefix-tokens` resent every turn
in `instructions`, one short user message per turn, `previous_response_id`, greedy, 16
output tokens. Two triode servers run it one after the other: with its default prompt cache
and with `--prompt-cache-bytes 0`. Per turn: time to the first streamed delta (TTFT: render,
prefill, first decode step), the input tokens and the cached ones. Markdown to stdout,
progress to stderr.

    .venv/bin/python bench/hybrid_cache.py
    .venv/bin/python bench/hybrid_cache.py --layers 28 --prefix-tokens 300
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import agent  # noqa: E402  (the chain's texts)
import throughput as tp  # noqa: E402  (the servers and the HTTP client)
from tests.fixtures import hybrid  # noqa: E402  (the model)

SERVERS = {"cache on": [], "cache off": ["--prompt-cache-bytes", "0"]}
DELTA = re.compile(rb'"type":"response\.[a-z_.]+\.delta"')


async def turn(conn: tp.Connection, body: dict) -> dict:
    start = time.perf_counter()
    first = None
    final: dict = {}
    async for data in conn.events("/v1/responses", {"model": tp.ALIAS, "stream": True,
                                                     "temperature": 0, **body}):
        if first is None and DELTA.search(data):
            first = time.perf_counter()
        elif b'"type":"response.completed"' in data or b'"type":"response.incomplete"' in data:
            final = json.loads(data)["response"]
        elif any(marker in data for marker in tp.FAILED):
            raise RuntimeError(f"triode: {data[:500]!r}")
    if not final:
        raise RuntimeError("triode: the stream ended without its response")
    usage = final["usage"]
    return {"id": final["id"], "ttft": (first or time.perf_counter()) - start,
            "input": usage["input_tokens"],
            "cached": usage["input_tokens_details"]["cached_tokens"],
            "output": final["output"]}


def chain(base_url: str, prefix: str, asks: list[str], answer_tokens: int) -> list[dict]:
    import trio

    async def main() -> list[dict]:
        conn = tp.Connection(base_url)
        turns: list[dict] = []
        for ask in asks:
            body = {"instructions": prefix, "input": ask, "max_output_tokens": answer_tokens}
            if turns:
                body["previous_response_id"] = turns[-1]["id"]
            turns.append(await turn(conn, body))
        return turns

    return trio.run(main)


def warm(base_url: str) -> None:
    import trio

    async def main() -> None:
        await turn(tp.Connection(base_url), {"input": tp.WARMUP_PROMPT, "max_output_tokens": 4})

    trio.run(main)


def report(runs: dict[str, list[dict]], args: argparse.Namespace, model: str,
           seconds: dict[str, float]) -> str:
    on, off = runs["cache on"], runs["cache off"]
    ms = 1000.0
    out = [f"model: {model}; command: bench/hybrid_cache.py {' '.join(sys.argv[1:])}", "",
           "| turn | input tokens | cached (on) | prefilled (on) | TTFT ms (on) | "
           "prefilled (off) | TTFT ms (off) | off / on |",
           "|---|---|---|---|---|---|---|---|"]
    for i, (a, b) in enumerate(zip(on, off), 1):
        out.append(f"| {i} | {a['input']} | {a['cached']} | {a['input'] - a['cached']} | "
                   f"{a['ttft'] * ms:.0f} | {b['input'] - b['cached']} | {b['ttft'] * ms:.0f} | "
                   f"{b['ttft'] / a['ttft']:.1f} |")
    later_on = statistics.median(t["ttft"] for t in on[1:])
    later_off = statistics.median(t["ttft"] for t in off[1:])
    same = [a["output"] == b["output"] for a, b in zip(on, off)]
    out += ["",
            f"turn {len(on)} TTFT: {on[-1]['ttft'] * ms:.0f} ms cache on, "
            f"{off[-1]['ttft'] * ms:.0f} ms off ({off[-1]['ttft'] / on[-1]['ttft']:.1f}x); "
            f"turns 2-{len(on)} median {later_on * ms:.0f} ms on, {later_off * ms:.0f} ms off; "
            f"chain {seconds['cache on']:.0f} s on, {seconds['cache off']:.0f} s off; "
            f"identical greedy output in {sum(same)} of {len(same)} turns "
            "(output items' content; ids differ)."]
    return "\n".join(out)


def strip_ids(turns: list[dict]) -> None:
    for t in turns:
        t["output"] = [{k: v for k, v in item.items() if k not in ("id", "call_id")}
                       for item in t["output"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=8,
                   help="layers of the 0.6B shape's 28 (every 4th is attention)")
    p.add_argument("--model", help="an existing model directory instead of building one")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--prefix-tokens", type=int, default=600)
    p.add_argument("--answer-tokens", type=int, default=16)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="triode-hybrid-bench-") as tmp:
        scratch = Path(tmp)
        if args.model:
            model_dir = Path(args.model)
        else:
            tp.log(f"building the hybrid model ({args.layers} layers) ...")
            model_dir = hybrid.build(scratch / "hybrid-0.6b",
                                     {**hybrid.SIZE_0_6B, "num_hidden_layers": args.layers})
        params = tp.parameter_count(model_dir)
        texts = agent.Texts(model_dir)
        prefix = "You are a careful assistant. " + texts.words_for(args.prefix_tokens)
        asks = [f"Reply with: {texts.words_for(4)}" for _ in range(args.turns)]
        runs: dict[str, list[dict]] = {}
        seconds: dict[str, float] = {}
        for name, flags in SERVERS.items():
            tp.log(f"{name}: starting")
            tp.EXTRA_TRIODE_FLAGS[:] = flags
            with tp.triode_server(model_dir, 2, scratch / f"{name.replace(' ', '-')}.log") as url:
                warm(url)
                tp.log(f"{name}: {args.turns}-turn chain")
                began = time.perf_counter()
                runs[name] = chain(url, prefix, asks, args.answer_tokens)
                seconds[name] = time.perf_counter() - began
                strip_ids(runs[name])
        model = (f"random qwen3_5, 0.6B shape with {args.layers} of 28 layers "
                 f"({params / 1e6:.0f}M parameters)" if not args.model else str(model_dir))
        print(report(runs, args, model, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
