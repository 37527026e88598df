#!/usr/bin/env python
"""What agents send, against triode and mlx_lm.server, in one run (issue 16).

    (chain)    a 20-turn conversation: a ~2,000-token instruction prefix resent every turn,
               one short user message per turn. triode chains turns with
               `previous_response_id` (its prompt cache keeps the prefix and the history);
               mlx_lm.server gets the whole history as chat messages every turn. Per turn:
               time to first token and, on triode, the share of the input served from cache.
    (edit)     one stream: the prompt carries a ~400-token passage and the answer repeats
               it with a few words changed (the bundled model's long-copy task). Output
               tokens/s after the first token, and the whole request's time.
    (arrivals) S streams (default 8) decode long answers without pause; then the same while
               a fresh ~3,000-token prompt arrives every 2 s. The streams' inter-token gaps
               (between consecutive text deltas of one response), p50/p99/max in both phases,
               and the long prompts' time to first token.

Servers: triode with its defaults (`--triode-flags` adds flags, e.g. `--prefill-chunk 2048`
for mlx-lm's own chunking; repeatable `--variant NAME=FLAGS` adds more triode servers),
mlx_lm.server on the same BLAS as triode (MKL preloaded) and on its stock install (MLX's own
BLAS). Servers run one after another; each scenario's figures for all servers come from one
invocation. Figures go to stdout as Markdown; progress to stderr.

    .venv/bin/python bench/agent.py --model bundled
    .venv/bin/python bench/agent.py --model bundled --scenarios arrivals \
        --variant chunk2048="--prefill-chunk 2048"
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput as tp  # noqa: E402  (the servers, the HTTP client and the models)

SCENARIOS = ("chain", "edit", "arrivals")
MLX_LM = "mlx_lm.server (MKL)"
MLX_LM_STOCK = "mlx_lm.server (stock)"
CHAIN_ANSWER = 16   # max output tokens of a chain turn: 20 turns and the prefix fit 4,096


def log(message: str) -> None:
    tp.log(message)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# ---------------------------------------------------------------------------------------------
# Text of a given length in the model's tokens


class Texts:
    def __init__(self, model_dir: Path, seed: int = 0):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.rng = random.Random(seed)
        self.words = tp.WORDS

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def words_for(self, tokens: int) -> str:
        """Random words, about `tokens` tokens long (never the same text twice)."""
        out: list[str] = []
        while (have := self.count(" ".join(out))) < tokens:
            # A word is 3-5 tokens: add what cannot overshoot by much, then count again.
            out += [self.rng.choice(self.words) for _ in range(max(1, (tokens - have) // 5))]
        return " ".join(out)


# ---------------------------------------------------------------------------------------------
# Requests


class Stream:
    """One streamed request's timeline: when each text delta arrived, and the end."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.deltas: list[float] = []
        self.final: dict = {}

    @property
    def ttft(self) -> float:
        return (self.deltas[0] if self.deltas else time.perf_counter()) - self.start

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.deltas, self.deltas[1:])]


async def triode_stream(conn: tp.Connection, body: dict) -> Stream:
    s = Stream()
    async for data in conn.events("/v1/responses", {"model": tp.ALIAS, "stream": True,
                                                     "temperature": 0, **body}):
        if b'"type":"response.output_text.delta"' in data:
            s.deltas.append(time.perf_counter())
        elif b'"type":"response.completed"' in data or b'"type":"response.incomplete"' in data:
            s.final = json.loads(data)["response"]
        elif any(marker in data for marker in tp.FAILED):
            raise RuntimeError(f"triode: {data[:500]!r}")
    if not s.final:
        raise RuntimeError("triode: the stream ended without response.completed")
    return s


async def chat_stream(conn: tp.Connection, messages: list[dict], max_tokens: int) -> Stream:
    s = Stream()
    text = []
    async for data in conn.events("/v1/chat/completions", {
            "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}):
        for choice in json.loads(data).get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                s.deltas.append(time.perf_counter())
                text.append(content)
    s.final = {"text": "".join(text)}
    return s


def triode_text(response: dict) -> str:
    return "".join(c.get("text", "") for item in response.get("output", [])
                   if item.get("type") == "message" for c in item.get("content", []))


# ---------------------------------------------------------------------------------------------
# Scenarios


def chain(base_url: str, kind: str, texts: Texts, turns: int, prefix_tokens: int) -> dict:
    import trio

    prefix = "You are a careful assistant. " + texts.words_for(prefix_tokens)
    asks = [f"Reply with: {texts.words_for(4)}" for _ in range(turns)]

    async def main() -> dict:
        conn = tp.Connection(base_url)
        ttfts, cached = [], []
        previous = None
        messages: list[dict] = [{"role": "system", "content": prefix}]
        for ask in asks:
            if kind == "triode":
                body = {"instructions": prefix, "input": ask, "max_output_tokens": CHAIN_ANSWER}
                if previous:
                    body["previous_response_id"] = previous
                s = await triode_stream(conn, body)
                previous = s.final["id"]
                usage = s.final["usage"]
                cached.append(usage["input_tokens_details"]["cached_tokens"]
                              / usage["input_tokens"])
            else:
                messages.append({"role": "user", "content": ask})
                s = await chat_stream(conn, messages, CHAIN_ANSWER)
                messages.append({"role": "assistant", "content": s.final["text"]})
            ttfts.append(s.ttft)
        return {"ttft": ttfts, "cached": cached}

    return trio.run(main)


def edit(base_url: str, kind: str, texts: Texts, passage_tokens: int, repeat: int) -> dict:
    import trio

    async def main() -> dict:
        conn = tp.Connection(base_url)
        rates, totals, tokens = [], [], []
        for _ in range(repeat):
            words = texts.words_for(passage_tokens).split()
            for i in range(0, len(words), 40):   # a few words changed, as an edit would
                words[i] = words[i].upper()
            prompt = "Reply with: " + " ".join(words)
            n = texts.count(" ".join(words)) + 16
            if kind == "triode":
                s = await triode_stream(conn, {"input": prompt, "max_output_tokens": n})
                out = s.final["usage"]["output_tokens"]
            else:
                s = await chat_stream(conn, [{"role": "user", "content": prompt}], n)
                out = texts.count(s.final["text"])
            end = time.perf_counter()
            if s.deltas and out > 1:
                rates.append((out - 1) / max(1e-9, end - s.deltas[0]))
            totals.append(end - s.start)
            tokens.append(out)
        return {"tok_s": statistics.median(rates) if rates else float("nan"),
                "seconds": statistics.median(totals), "tokens": tokens}

    return trio.run(main)


def arrivals(base_url: str, kind: str, texts: Texts, streams: int, seconds: float,
             long_tokens: int, interval: float, answer_tokens: int) -> dict:
    import trio

    # Every prompt is made before the clock starts: tokenizing thousands of words in the
    # client's trio loop would delay its reads and show up as gaps.
    answers = iter(["Reply with: " + texts.words_for(answer_tokens)
                    for _ in range(int(streams * seconds * 2) + 16)] * 100)
    longs = ["Reply with: go. " + texts.words_for(long_tokens)
             for _ in range(int(seconds / interval) + 1)]

    async def phase(with_long: bool) -> dict:
        gaps: list[float] = []
        long_ttfts: list[float] = []
        stop = trio.current_time() + seconds

        async def streamer() -> None:
            conn = tp.Connection(base_url)
            while trio.current_time() < stop:
                prompt = next(answers)
                if kind == "triode":
                    s = await triode_stream(conn, {"input": prompt,
                                                   "max_output_tokens": answer_tokens + 16})
                else:
                    s = await chat_stream(conn, [{"role": "user", "content": prompt}],
                                          answer_tokens + 16)
                gaps.extend(s.gaps())

        async def long_one(prompt: str) -> None:
            conn = tp.Connection(base_url)
            if kind == "triode":
                s = await triode_stream(conn, {"input": prompt, "max_output_tokens": 16})
            else:
                s = await chat_stream(conn, [{"role": "user", "content": prompt}], 16)
            long_ttfts.append(s.ttft)

        async with trio.open_nursery() as nursery:
            for _ in range(streams):
                nursery.start_soon(streamer)
            if with_long:
                await trio.sleep(interval / 2)
                for prompt in longs:
                    if trio.current_time() >= stop:
                        break
                    nursery.start_soon(long_one, prompt)
                    await trio.sleep(interval)
        return {"p50": percentile(gaps, 0.5), "p99": percentile(gaps, 0.99),
                "max": max(gaps, default=float("nan")), "gaps": len(gaps),
                "long_ttft_p50": percentile(long_ttfts, 0.5), "long": len(long_ttfts)}

    async def main() -> dict:
        return {"alone": await phase(False), "long": await phase(True)}

    return trio.run(main)


# ---------------------------------------------------------------------------------------------
# Servers


@contextmanager
def triode_with(model_dir: Path, slots: int, flags: list[str], log_path: Path) -> Iterator[str]:
    saved = list(tp.EXTRA_TRIODE_FLAGS)
    tp.EXTRA_TRIODE_FLAGS[:] = flags
    try:
        with tp.triode_server(model_dir, slots, log_path) as url:
            yield url
    finally:
        tp.EXTRA_TRIODE_FLAGS[:] = saved


def servers(model_dir: Path, slots: int, variants: dict[str, list[str]], scratch: Path,
            names: list[str]):
    """(name, kind, a context manager starting it); every server decodes `slots` sequences
    together (the streams plus room for the long prompts, which then need not queue)."""
    for name, flags in variants.items():
        log_path = scratch / f"{name.replace(' ', '-')}.log"
        yield name, "triode", lambda f=flags, lp=log_path: triode_with(model_dir, slots, f, lp)
    if "mlx-lm" in names:
        yield MLX_LM, "chat", lambda: tp.mlx_lm_server(model_dir, slots, scratch / "mlx.log")
    if "mlx-lm-stock" in names:
        yield MLX_LM_STOCK, "chat", lambda: tp.mlx_lm_server(
            model_dir, slots, scratch / "stock.log", stock=True)


def warm(base_url: str, kind: str) -> None:
    import trio

    async def main() -> None:
        conn = tp.Connection(base_url)
        if kind == "triode":
            await triode_stream(conn, {"input": tp.WARMUP_PROMPT, "max_output_tokens": 8})
        else:
            await chat_stream(conn, [{"role": "user", "content": tp.WARMUP_PROMPT}], 8)

    trio.run(main)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="bundled", help="bundled, random, random-0.6b or a path")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--servers", default="triode,mlx-lm,mlx-lm-stock")
    p.add_argument("--triode-flags", default="", help="extra flags for the triode server")
    p.add_argument("--variant", action="append", default=[],
                   help="NAME=FLAGS: one more triode server with these extra flags")
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--prefix-tokens", type=int, default=2000)
    p.add_argument("--passage-tokens", type=int, default=400)
    p.add_argument("--edit-repeat", type=int, default=3)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0, help="length of each arrivals phase")
    p.add_argument("--long-tokens", type=int, default=3000)
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--answer-tokens", type=int, default=200,
                   help="arrivals: the streams' answer length")
    args = p.parse_args(argv)
    scenarios = args.scenarios.split(",")
    names = args.servers.split(",")
    variants = {"triode": shlex.split(args.triode_flags)} if "triode" in names else {}
    for v in args.variant:
        name, _, flags = v.partition("=")
        variants[f"triode {name}"] = shlex.split(args.triode_flags) + shlex.split(flags)

    with tempfile.TemporaryDirectory(prefix="triode-agent-bench-") as tmp:
        scratch = Path(tmp)
        ((model_name, model_dir),) = tp.resolve_models([args.model], scratch)
        texts = Texts(model_dir)
        results: dict[str, dict] = {}
        slots = max(8, args.streams + 2)
        for name, kind, start in servers(model_dir, slots, variants, scratch, names):
            log(f"{name}: starting")
            with start() as url:
                warm(url, kind)
                r: dict = {}
                if "chain" in scenarios:
                    log(f"{name}: chain")
                    r["chain"] = chain(url, kind, texts, args.turns, args.prefix_tokens)
                if "edit" in scenarios:
                    log(f"{name}: edit")
                    r["edit"] = edit(url, kind, texts, args.passage_tokens, args.edit_repeat)
                if "arrivals" in scenarios:
                    log(f"{name}: arrivals")
                    r["arrivals"] = arrivals(url, kind, texts, args.streams, args.seconds,
                                             args.long_tokens, args.interval,
                                             args.answer_tokens)
                results[name] = r
        print(report(results, model_name, args))
    return 0


def report(results: dict[str, dict], model_name: str, args: argparse.Namespace) -> str:
    out = [f"model: {model_name}; command: bench/agent.py {' '.join(sys.argv[1:])}", ""]
    first = next(iter(results.values()), {})
    ms = 1000.0
    if "chain" in first:
        out += ["### chain", "",
                "| server | turn 1 TTFT ms | turn 2 | turn N | turn N / turn 2 | later turns "
                "median TTFT ms | cached share of later turns' input (min) |", "|---|---|---|---|---|---|---|"]
        for name, r in results.items():
            t = r["chain"]["ttft"]
            cached = r["chain"]["cached"][1:]
            out.append(f"| {name} | {t[0] * ms:.0f} | {t[1] * ms:.0f} | {t[-1] * ms:.0f} | "
                       f"{t[-1] / t[1]:.2f} | {statistics.median(t[1:]) * ms:.0f} | "
                       + (f"{min(cached):.3f}" if cached else "—") + " |")
        later = {n: statistics.median(r["chain"]["ttft"][1:]) for n, r in results.items()}
        for name in results:
            for ref in (MLX_LM, MLX_LM_STOCK):
                if ref in later and not name.startswith("mlx"):
                    out.append(f"\n{name} / {ref} later-turn TTFT: {later[name] / later[ref]:.2f}")
        out.append("")
    if "edit" in first:
        out += ["### edit", "", "| server | output tok/s | request s | output tokens |",
                "|---|---|---|---|"]
        for name, r in results.items():
            e = r["edit"]
            out.append(f"| {name} | {e['tok_s']:.1f} | {e['seconds']:.2f} | {e['tokens']} |")
        out.append("")
    if "arrivals" in first:
        out += ["### arrivals", "",
                "| server | gap p50 ms alone | p99 alone | p50 with long prompts | p99 with | "
                "max with | p99 with / p50 alone | long prompt TTFT p50 s | long prompts |",
                "|---|---|---|---|---|---|---|---|---|"]
        for name, r in results.items():
            a, w = r["arrivals"]["alone"], r["arrivals"]["long"]
            out.append(f"| {name} | {a['p50'] * ms:.1f} | {a['p99'] * ms:.1f} | "
                       f"{w['p50'] * ms:.1f} | {w['p99'] * ms:.1f} | {w['max'] * ms:.0f} | "
                       f"{w['p99'] / a['p50']:.2f} | {w['long_ttft_p50']:.2f} | {w['long']} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
