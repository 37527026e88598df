#!/usr/bin/env python
"""The same work through the three APIs, in one run: what the Chat Completions and Anthropic
Messages translations cost against `/v1/responses`.

    .venv/bin/python bench/apis.py [--model smollm2] [--rounds 5] [--tokens 32] [--turns 20]

One server. Each round sends the same request (a short prompt, `--tokens` output tokens,
greedy) through each API: at C=1 one request per API in turn, five times with the order
rotating, then at C=8 eight at once per API; interleaved so that machine noise falls on all
alike (run back to back per API, the first API measured looked up to 10% faster: noise,
not translation). A request's time is measured by the same HTTP
client (httpx) for all three, from sending to its last byte. Then a 20-turn chain per API:
each turn sends the whole history so far (fixed assistant turns appended), so every turn
after the first is a prompt-cache hit; the cached share is the chain's cached prompt tokens
over its prompt tokens, as each API reports them.

Prints, per API, the median time per request at C=1 and C=8 and its ratio to Responses'
(1.00 = no measurable cost), and each chain's cached share.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import time
from typing import Any, Callable

import httpx

import serving

PROMPT = "Write one sentence about the sea."
Body = Callable[[list[dict[str, str]], int], tuple[str, dict[str, Any]]]


def responses(history: list[dict[str, str]], tokens: int) -> tuple[str, dict[str, Any]]:
    return "/v1/responses", {"input": history, "max_output_tokens": tokens,
                             "temperature": 0, "store": False}


def chat(history: list[dict[str, str]], tokens: int) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {"messages": history, "max_tokens": tokens,
                                    "temperature": 0}


def messages(history: list[dict[str, str]], tokens: int) -> tuple[str, dict[str, Any]]:
    return "/v1/messages", {"messages": history, "max_tokens": tokens, "temperature": 0}


APIS: dict[str, Body] = {"responses": responses, "chat": chat, "messages": messages}


def answer(api: str, body: dict[str, Any]) -> tuple[str, int, int]:
    """(text, prompt tokens, cached prompt tokens) as each API reports them."""
    if api == "responses":
        text = "".join(p["text"] for item in body["output"] if item["type"] == "message"
                       for p in item["content"] if p["type"] == "output_text")
        u = body["usage"]
        return text, u["input_tokens"], u["input_tokens_details"]["cached_tokens"]
    if api == "chat":
        u = body["usage"]
        return body["choices"][0]["message"]["content"] or "", u["prompt_tokens"], \
            u["prompt_tokens_details"]["cached_tokens"]
    u = body["usage"]
    text = "".join(b["text"] for b in body["content"] if b["type"] == "text")
    return text, u["input_tokens"] + u["cache_read_input_tokens"], u["cache_read_input_tokens"]


def send(client: httpx.Client, model: str, api: str, history: list[dict[str, str]],
         tokens: int) -> tuple[float, dict[str, Any]]:
    path, body = APIS[api](history, tokens)
    started = time.perf_counter()
    r = client.post(path, json={"model": model, **body})
    elapsed = time.perf_counter() - started
    assert r.status_code == 200, r.text
    return elapsed, r.json()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default=None, help="--model of the server (default: bundled)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--turns", type=int, default=20)
    args = p.parse_args()
    proc, url = serving.start("--access-log", "off", "--parallel", "8",
                              *(["--model", args.model] if args.model else []))
    try:
        client = httpx.Client(base_url=url, timeout=600,
                              limits=httpx.Limits(max_connections=32))
        model = client.get("/v1/models").json()["data"][0]["id"]
        history = [{"role": "user", "content": PROMPT}]
        for api in APIS:   # warm: every API's first request (and the prompt's cache entry)
            send(client, model, api, history, args.tokens)
        times: dict[tuple[str, int], list[float]] = {(a, c): [] for a in APIS for c in (1, 8)}
        pool = concurrent.futures.ThreadPoolExecutor(8)
        order = list(APIS)
        for r in range(args.rounds):
            for _ in range(5):   # C=1: one request per API in turn, the order rotating
                order = order[1:] + order[:1]
                for api in order:
                    times[(api, 1)].append(send(client, model, api, history, args.tokens)[0])
            for api in order:    # C=8: eight at once, one API after another
                started = time.perf_counter()
                list(pool.map(lambda _: send(client, model, api, history, args.tokens),
                              range(8)))
                times[(api, 8)].append((time.perf_counter() - started) / 8)
        print(f"model {model}, {args.tokens} output tokens, {args.rounds} rounds "
              "(median seconds per request; ratio to responses)")
        for c in (1, 8):
            base = statistics.median(times[("responses", c)])
            for api in APIS:
                m = statistics.median(times[(api, c)])
                print(f"  C={c} {api:9s} {m:7.3f} s  x{m / base:.3f}")
        print(f"{args.turns}-turn chain (each turn the whole history): cached share")
        for mark, api in zip("ABC", APIS):
            # Each chain its own first line (of the same length), so that no chain is served
            # from another's cache entries: each is a hit on its own earlier turns only.
            turns = [{"role": "user", "content": f"Chain {mark}. {PROMPT}"}]
            prompt = cached = 0
            for turn in range(args.turns):
                _, body = send(client, model, api, turns, 16)
                _, p_tokens, c_tokens = answer(api, body)
                prompt, cached = prompt + p_tokens, cached + c_tokens
                # The same assistant turns in every chain (the model's own text differs
                # from chain to chain), so the three chains' prompts are the same length.
                turns += [{"role": "assistant", "content": "The sea is wide and deep."},
                          {"role": "user", "content": f"Another one ({turn})."}]
            print(f"  {api:9s} prompt {prompt:6d}  cached {cached:6d}  "
                  f"share {cached / prompt:.3f}")
        return 0
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    sys.exit(main())
