#!/usr/bin/env python
"""Generated tokens/s and time to first token at several concurrency levels, three ways.

    (a) raw mlx-lm `BatchGenerator` in this process, on MKL (what triode's engine drives);
        (a-builtin) is the same on MLX's own BLAS, in a subprocess, to show the BLAS gain
    (b) triode: `POST /v1/responses`, streamed (SSE), with its defaults (prompt cache on)
    (c) mlx_lm.server: `POST /v1/chat/completions`, streamed, on MKL too (LD_PRELOAD), with
        its defaults (prompt cache on)

All three get the MKL thread cap triode's `--blas-threads 0` picks for the model. (a) has no
prompt cache: it is mlx-lm's batch generator alone; `--triode-env TRIODE_PROMPT_CACHE_BYTES=0`
measures (b) without one.

Every path gets the same prompts, greedy decoding and the same max output tokens, and all of
them run in ONE invocation, interleaved per concurrency level: the machine is noisy, so only
ratios within one run mean anything. Concurrency C means C requests in flight at all times
(as one finishes the next starts) until N requests are done. Servers bind 127.0.0.1 only and
are stopped in `finally`.

    .venv/bin/python bench/throughput.py --model all                 # the full benchmark
    .venv/bin/python bench/throughput.py --smoke --model /tmp/tinytest  # a quick check
    .venv/bin/python bench/throughput.py --paths a,b,c --repeat 3      # less noise: median of 3
    git worktree add /tmp/ref OLD && .venv/bin/python bench/throughput.py --model bundled \
        --paths a,b,b-ref --ref-src /tmp/ref --repeat 3   # this tree's triode against OLD's

The Markdown tables go to stdout (for docs/benchmarks.md); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
BUNDLED_DIR = REPO / "src" / "triode" / "model" / "tiny"
PATHS = ("a", "a-builtin", "b", "b-ref", "c", "c-stock")
PATH_NAMES = {"a": "(a) mlx-lm", "a-builtin": "(a) builtin BLAS", "b": "(b) triode",
              "b-ref": "(b-ref) triode at --ref-src", "c": "(c) mlx_lm.server",
              "c-stock": "(c-stock) mlx_lm.server, stock install"}
ALIAS = "bench"
SERVER_START_TIMEOUT = 600.0   # seconds; loading a model on a busy 2-core machine is slow
REQUEST_TIMEOUT = 3600.0
WARMUP_TOKENS = 8

# Random-weight models with the bundled tokenizer's ~1k vocabulary, by --model name:
# "random", ~75M parameters; "random-0.6b", shaped like Qwen3-0.6B (hidden 1024, 28 layers,
# 16 query / 8 KV heads of 128, MLP 3072): 0.44B parameters, the 0.6B less Qwen's
# 151k-token embedding.
RANDOM_SIZES = {
    "random": dict(hidden_size=768, num_hidden_layers=12, intermediate_size=2048,
                   num_attention_heads=12, num_key_value_heads=4, head_dim=64),
    "random-0.6b": dict(hidden_size=1024, num_hidden_layers=28, intermediate_size=3072,
                        num_attention_heads=16, num_key_value_heads=8, head_dim=128),
}
RANDOM_SEED = 0
# Used when the bundled model has no config.json yet (its weights may still be training).
QWEN3_BASE_CONFIG = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-06,
    "max_position_embeddings": 4096, "rope_theta": 10000.0, "tie_word_embeddings": True,
    "torch_dtype": "float32",
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

# ---------------------------------------------------------------------------------------------
# Prompts


WORDS = ("apple river stone cloud violet copper lantern meadow harbor pepper falcon maple "
         "canyon velvet ember glacier orbit tulip marble cedar comet willow saffron thunder "
         "pebble quartz lemon anchor breeze cobalt dune fern garnet hazel ivory juniper kelp "
         "lotus mango nectar").split()
WARMUP_PROMPT = "Reply with: warm up"   # not in the timed list, so no prompt cache helps


def make_prompts(count: int) -> list[str]:
    """`Reply with: <words>` (the bundled model's task), distinct, the same in every run."""
    rng = random.Random(1234)
    prompts: list[str] = []
    while len(prompts) < count:
        prompt = "Reply with: " + " ".join(rng.sample(WORDS, rng.randint(3, 6)))
        if prompt not in prompts:
            prompts.append(prompt)
    return prompts


# ---------------------------------------------------------------------------------------------
# Results


def median_run(runs: list["Result"]) -> "Result | None":
    """The run with the median rate (the upper one of two): interference from other work on
    the machine only ever slows a run down, and interleaved repeats give every path the same
    chances of meeting it."""
    if not runs:
        return None
    if len({r.tokens for r in runs}) > 1:
        log(f"  warning: repeats generated different token counts: {[r.tokens for r in runs]}")
    return sorted(runs, key=lambda r: r.tokens_per_second)[len(runs) // 2]


@dataclass
class Result:
    tokens: int               # generated tokens, the final (EOS) token included, as servers count
    seconds: float            # wall time from the first request to the last token
    ttft_seconds: list[float]

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds

    @property
    def p50_ttft_ms(self) -> float:
        return statistics.median(self.ttft_seconds) * 1000


# ---------------------------------------------------------------------------------------------
# (a) raw BatchGenerator, in process


def load_model(model_dir: Path):
    from mlx_lm import load

    return load(str(model_dir), trust_remote_code=True)   # the bundled sliding_qwen3.py


def encode(tokenizer, prompt: str) -> list[int]:
    """The prompt as triode renders it: chat template, generation prompt, no extra BOS."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                         add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


def run_raw(model, tokenizer, prompts: list[str], concurrency: int, max_tokens: int) -> Result:
    from mlx_lm.generate import BatchGenerator

    # Tokenized before the clock starts; the servers tokenize inside theirs, which is cheap.
    waiting = [encode(tokenizer, p) for p in reversed(prompts)]
    # The settings triode's engine uses (src/triode/model/engine.py).
    generator = BatchGenerator(model, stop_tokens=[[t] for t in tokenizer.eos_token_ids],
                               completion_batch_size=concurrency,
                               prefill_batch_size=min(concurrency, 8))
    inserted_at: dict[int, float] = {}
    ttft: dict[int, float] = {}
    in_flight: set[int] = set()
    tokens = 0

    def top_up() -> None:
        while waiting and len(in_flight) < concurrency:
            (uid,) = generator.insert([waiting.pop()], [max_tokens])
            inserted_at[uid] = time.perf_counter()
            in_flight.add(uid)

    start = time.perf_counter()
    try:
        top_up()
        while in_flight:
            _, responses = generator.next()
            now = time.perf_counter()
            for r in responses:
                tokens += 1
                ttft.setdefault(r.uid, now - inserted_at[r.uid])
                if r.finish_reason is not None:
                    in_flight.discard(r.uid)
            top_up()
    finally:
        generator.close()
    return Result(tokens, time.perf_counter() - start, list(ttft.values()))


_loaded: tuple[Path, object, object] | None = None   # one model kept across concurrency levels


def blas_threads_for(model_dir: Path) -> int:
    """The MKL thread cap triode's `--blas-threads 0` (auto) picks for this model; the bench
    gives (a) and (c) the same, so all three paths run on the same BLAS the same way."""
    from triode.model.blas import auto_threads

    return auto_threads(json.loads((model_dir / "config.json").read_text()).get("hidden_size"))


def measure_raw(model_dir: Path, prompts: list[str], concurrency: int, max_tokens: int) -> Result:
    from triode.model.blas import set_threads

    global _loaded
    set_threads(blas_threads_for(model_dir))
    if _loaded is None or _loaded[0] != model_dir:
        _loaded = None   # drop the previous model before loading the next
        _loaded = (model_dir, *load_model(model_dir))
    _, model, tokenizer = _loaded
    run_raw(model, tokenizer, [WARMUP_PROMPT] * concurrency, concurrency, WARMUP_TOKENS)
    return run_raw(model, tokenizer, prompts, concurrency, max_tokens)


def measure_raw_builtin_blas(model_dir: Path, prompts: list[str], concurrency: int,
                             max_tokens: int) -> Result:
    """(a) on MLX's own BLAS: a fresh process, since this one already preloaded MKL."""
    cmd = [sys.executable, __file__, "--raw-worker", "--blas", "none", "--model", str(model_dir),
           "--concurrency", str(concurrency), "--requests", str(len(prompts)),
           "--max-tokens", str(max_tokens)]
    with child_process(cmd, stdout=subprocess.PIPE) as proc:
        out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"raw worker exited with {proc.returncode}")
    return Result(**json.loads(out.strip().splitlines()[-1]))


def raw_worker(args: argparse.Namespace) -> int:
    """The subprocess side of measure_raw_builtin_blas: one measurement, JSON on stdout."""
    from triode.model.blas import sgemm_provider

    prompts = make_prompts(args.requests)
    result = measure_raw(Path(args.model[0]), prompts, args.concurrency[0], args.max_tokens)
    # None: no cblas_sgemm in the global scope, i.e. MLX calls the BLAS it links itself.
    log(f"  raw worker: cblas_sgemm from {sgemm_provider() or 'MLX (builtin)'}")
    print(json.dumps(asdict(result)))
    return 0


# ---------------------------------------------------------------------------------------------
# Server subprocesses


@contextmanager
def child_process(cmd: list[str], *, env: dict[str, str] | None = None,
                  log_path: Path | None = None, stdout=None) -> Iterator[subprocess.Popen]:
    """A subprocess that is stopped (TERM, then KILL) when the block exits, however it exits."""
    log_file = open(log_path, "wb") if log_path else None
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=log_file or stdout,
                            stderr=subprocess.STDOUT if log_file else None)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if log_file:
            log_file.close()


def wait_for_log_line(proc: subprocess.Popen, log_path: Path, pattern: str) -> re.Match:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        match = re.search(pattern, log_path.read_text(errors="replace"))
        if match:
            return match
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"server did not start ({' '.join(proc.args)}):\n{tail(log_path)}")


def wait_for_health(proc: subprocess.Popen, log_path: Path, url: str) -> None:
    import httpx

    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server did not start ({' '.join(proc.args)}):\n{tail(log_path)}")


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def free_port() -> int:
    # mlx_lm.server has no way to report a port it picked itself.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TRIODE_ENV: dict[str, str] = {}   # --triode-env: extra environment for the (b) server only
EXTRA_TRIODE_FLAGS: list[str] = []  # more flags for every triode server (bench/agent.py's variants)
REF_SRC: list[Path] = []          # --ref-src: the source tree the (b-ref) server runs


@contextmanager
def triode_process(model_dir: Path, concurrency: int,
                   log_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """A triode server: (its URL, its process)."""
    cmd = [sys.executable, "-m", "triode", "serve", "--host", "127.0.0.1", "--port", "0",
           "--model", str(model_dir), "--model-alias", ALIAS, "--parallel", str(concurrency),
           "--log-level", "warning", *EXTRA_TRIODE_FLAGS]
    with child_process(cmd, env={**os.environ, **TRIODE_ENV}, log_path=log_path) as proc:
        match = wait_for_log_line(proc, log_path, r"triode listening on (http://\S+)")
        yield match.group(1), proc


@contextmanager
def triode_server(model_dir: Path, concurrency: int, log_path: Path) -> Iterator[str]:
    with triode_process(model_dir, concurrency, log_path) as (url, _):
        yield url


@contextmanager
def triode_ref_server(model_dir: Path, concurrency: int, log_path: Path) -> Iterator[str]:
    """Triode from the --ref-src tree (another commit's checkout): its `src/` comes first on
    PYTHONPATH, ahead of this tree's editable install; same flags, same environment."""
    src = str(REF_SRC[0] / "src")
    saved = dict(TRIODE_ENV)
    TRIODE_ENV["PYTHONPATH"] = src + os.pathsep + os.environ.get("PYTHONPATH", "")
    try:
        with triode_process(model_dir, concurrency, log_path) as (url, _):
            yield url
    finally:
        TRIODE_ENV.clear()
        TRIODE_ENV.update(saved)


@contextmanager
def mlx_lm_server(model_dir: Path, concurrency: int, log_path: Path, *,
                  stock: bool = False) -> Iterator[str]:
    """mlx_lm.server on the BLAS triode uses, or (`stock`) as installed: MLX's own BLAS."""
    from triode.model.blas import find_mkl

    env = dict(os.environ)
    mkl = None if stock else find_mkl()
    if mkl is not None and platform.system() == "Linux":
        # The same BLAS triode preloads, the same way: first in the global lookup scope.
        env["LD_PRELOAD"] = " ".join(filter(None, [str(mkl), env.get("LD_PRELOAD")]))
        env.setdefault("MKL_THREADING_LAYER", "INTEL")
        if threads := blas_threads_for(model_dir):
            env["MKL_NUM_THREADS"] = str(threads)
    port = free_port()
    # `python -m mlx_lm.server` is deprecated in favour of the `server` subcommand.
    cmd = [sys.executable, "-m", "mlx_lm", "server", "--model", str(model_dir),
           "--host", "127.0.0.1", "--port", str(port),
           # Its BatchGenerator's sizes, set as triode's engine sets them.
           "--decode-concurrency", str(concurrency),
           "--prompt-concurrency", str(min(concurrency, 8)),
           "--log-level", "WARNING",
           "--trust-remote-code"]   # the bundled model's architecture file, sliding_qwen3.py
    with child_process(cmd, env=env, log_path=log_path) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_for_health(proc, log_path, base + "/health")
        yield base


# ---------------------------------------------------------------------------------------------
# (b) and (c): streaming HTTP clients


class RemoteClosedEarly(RuntimeError):
    """The server closed the connection before sending anything of its response."""


class Connection:
    """One keep-alive HTTP/1.1 connection (h11 over a trio socket), the way one client
    worker holds one pooled connection. The bench client shares the machine's two cores with
    the server it measures, so it does as little as a correct client can: h11 instead of
    httpx's layers, and SSE payloads handed over as bytes for the caller to parse only where
    it needs to (measured: the httpx client cost 7 ms of CPU per request at C=1, and its
    latency made triode's C=1 requests 99 ms against 77 ms with a plain blocking client)."""

    def __init__(self, base_url: str):
        host, port = base_url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.stream = None
        self.h11 = None

    async def events(self, path: str, body: dict):
        """POSTs `body` as JSON and yields each SSE `data:` payload (bytes) to the stream's
        end, so that the connection can carry the next request. A kept-alive connection the
        server closed meanwhile (llama-server closes idle ones) is opened anew and the request
        sent again, as HTTP clients do when nothing of the response had arrived."""
        import h11

        reused = self.stream is not None and self.h11.our_state is h11.IDLE
        try:
            async for data in self._events(path, body):
                reused = False   # something arrived: never sent twice from here on
                yield data
        except RemoteClosedEarly:
            if not reused:
                raise
            await self.stream.aclose()
            self.stream = None
            async for data in self._events(path, body):
                yield data

    async def _events(self, path: str, body: dict):
        import h11
        import trio

        if self.stream is None or self.h11.our_state is not h11.IDLE:
            # New, or left mid-response by an error: a fresh connection.
            if self.stream is not None:
                await self.stream.aclose()
            self.stream = await trio.open_tcp_stream(self.host, self.port)
            self.h11 = h11.Connection(h11.CLIENT)
        conn = self.h11
        payload = json.dumps(body).encode()
        status = None
        pending = b""

        async def next_event():
            """h11's next event, reading as needed; a kept-alive connection the server had
            closed before anything of the response came is RemoteClosedEarly."""
            while True:
                try:
                    event = conn.next_event()
                    if event is not h11.NEED_DATA:
                        return event
                    conn.receive_data(await self.stream.receive_some(65536))
                except (h11.RemoteProtocolError, trio.BrokenResourceError, OSError) as exc:
                    if status is None:
                        raise RemoteClosedEarly(f"{path}: connection closed before a "
                                                "response") from exc
                    raise

        try:
            await self.stream.send_all(
                conn.send(h11.Request(method="POST", target=path, headers=[
                    ("Host", self.host), ("Content-Type", "application/json"),
                    ("Accept", "text/event-stream"), ("Content-Length", str(len(payload)))]))
                + conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage()))
        except (trio.BrokenResourceError, OSError) as exc:
            raise RemoteClosedEarly(f"{path}: connection closed before the request") from exc
        while True:
            event = await next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                pending += event.data
                if status != 200:
                    continue
                *frames, pending = pending.split(b"\n\n")
                for frame in frames:
                    for line in frame.split(b"\n"):
                        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                            yield line[5:]
            elif isinstance(event, h11.EndOfMessage):
                if conn.their_state is h11.DONE:
                    conn.start_next_cycle()
                else:   # the server closes after each response (mlx_lm.server does)
                    await self.stream.aclose()
                    self.stream = None
                if status != 200:
                    raise RuntimeError(f"{path}: HTTP {status}: {pending[:500]!r}")
                return
            elif isinstance(event, h11.ConnectionClosed):
                if status is None:
                    raise RemoteClosedEarly(f"{path}: connection closed before a response")
                raise RuntimeError(f"{path}: connection closed mid-response")


FAILED = (b'"type":"response.failed"', b'"type":"error"')


async def one_triode_request(conn: Connection, prompt: str, max_tokens: int) -> tuple[int, float]:
    body = {"model": ALIAS, "input": prompt, "stream": True, "max_output_tokens": max_tokens,
            "temperature": 0}
    start = time.perf_counter()
    ttft = None
    last = None
    async for data in conn.events("/v1/responses", body):
        if ttft is None and b'"type":"response.output_text.delta"' in data:
            ttft = time.perf_counter() - start
        if any(marker in data for marker in FAILED):
            raise RuntimeError(f"triode: {data[:500]!r}")
        last = data
    event = json.loads(last) if last else {}
    if event.get("type") not in ("response.completed", "response.incomplete"):
        raise RuntimeError(f"triode: the stream ended with {event.get('type')!r}, "
                           "not response.completed/incomplete")
    return event["response"]["usage"]["output_tokens"], ttft or time.perf_counter() - start


async def one_chat_request(conn: Connection, prompt: str, max_tokens: int,
                           count_tokens) -> tuple[int, float]:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft = None
    chunks = []
    async for data in conn.events("/v1/chat/completions", body):
        if ttft is None and any((c.get("delta") or {}).get("content")
                                for c in json.loads(data).get("choices") or []):
            ttft = time.perf_counter() - start
        chunks.append(data)
    usage = json.loads(chunks[-1]).get("usage") if chunks else None
    if usage:
        tokens = usage["completion_tokens"]
    else:   # no usage reported: count the streamed text's tokens
        tokens = count_tokens("".join((c.get("delta") or {}).get("content") or ""
                                      for chunk in chunks
                                      for c in json.loads(chunk).get("choices") or []))
    return tokens, ttft or time.perf_counter() - start


def run_workers(base_url: str, one_request, jobs: list, concurrency: int
                ) -> tuple[list, float]:
    """C workers, each on its own keep-alive connection, taking the next job as soon as its
    previous response has ended: every job's result (in completion order) and the wall
    time."""
    import trio

    async def main() -> tuple[list, float]:
        todo = iter(jobs)   # shared: trio tasks switch only at awaits
        done: list = []

        async def worker() -> None:
            conn = Connection(base_url)
            try:
                for job in todo:
                    with trio.fail_after(REQUEST_TIMEOUT):
                        done.append(await one_request(conn, job))
            finally:
                if conn.stream is not None:
                    await conn.stream.aclose()

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
        return done, time.perf_counter() - start

    return trio.run(main)


def drive_http(base_url: str, one_request, prompts: list[str], concurrency: int) -> Result:
    """`run_workers` over the prompts: tokens, wall time and each request's TTFT."""
    done, seconds = run_workers(base_url, one_request, prompts, concurrency)
    return Result(sum(t for t, _ in done), seconds, [ttft for _, ttft in done])


def measure_server(server, one_request, model_dir: Path, prompts: list[str], concurrency: int,
                   max_tokens: int, log_path: Path) -> Result:
    with server(model_dir, concurrency, log_path) as base_url:
        # Warm-up: the first requests load lazily-initialized state and size the batch buffers.
        drive_http(base_url, lambda c, p: one_request(c, p, WARMUP_TOKENS),
                   [WARMUP_PROMPT] * concurrency, concurrency)
        return drive_http(base_url, lambda c, p: one_request(c, p, max_tokens), prompts,
                          concurrency)


# ---------------------------------------------------------------------------------------------
# Models


def create_random_model(directory: Path, size: dict[str, int]) -> Path:
    """A random-weight qwen3 model of `size` with the bundled tokenizer, the same every run."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.qwen3 import Model, ModelArgs

    directory.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(BUNDLED_DIR / name, directory / name)
    bundled_config = BUNDLED_DIR / "config.json"
    config = json.loads(bundled_config.read_text()) if bundled_config.exists() else {
        **QWEN3_BASE_CONFIG, "vocab_size": tokenizer_vocab_size(BUNDLED_DIR / "tokenizer.json")}
    config.update(size)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    mx.random.seed(RANDOM_SEED)
    model = Model(ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    mx.save_safetensors(str(directory / "model.safetensors"),
                        dict(tree_flatten(model.parameters())))
    return directory


def tokenizer_vocab_size(tokenizer_json: Path) -> int:
    data = json.loads(tokenizer_json.read_text())
    ids = list(data["model"]["vocab"].values()) + [t["id"] for t in data.get("added_tokens", [])]
    return max(ids) + 1


def parameter_count(model_dir: Path) -> int:
    """From the safetensors headers, without loading anything."""
    total = 0
    for path in model_dir.glob("*.safetensors"):
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        for name, tensor in header.items():
            if name != "__metadata__":
                count = 1
                for dim in tensor["shape"]:
                    count *= dim
                total += count
    return total


def resolve_models(names: list[str], scratch: Path) -> list[tuple[str, Path]]:
    if "all" in names:
        names = ["bundled", *RANDOM_SIZES] + [n for n in names
                                              if n not in ("all", "bundled", *RANDOM_SIZES)]
    models = []
    for name in dict.fromkeys(names):
        if name in RANDOM_SIZES:
            log(f"creating the {name} model ...")
            models.append((name, create_random_model(scratch / f"{name}-model",
                                                     RANDOM_SIZES[name])))
            continue
        path = BUNDLED_DIR if name == "bundled" else Path(name).resolve()
        missing = [f for f in ("config.json", "model.safetensors") if not (path / f).exists()]
        if missing:
            sys.exit(f"--model {name}: {path} has no {', '.join(missing)}"
                     + (" (is the bundled model trained yet?)" if name == "bundled" else ""))
        models.append((name, path))
    return models


# ---------------------------------------------------------------------------------------------
# Report


def markdown_table(results: dict[tuple[int, str], Result | None], levels: list[int],
                   paths: list[str]) -> str:
    def cell(value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    def rate(level: int, path: str) -> float | None:
        r = results.get((level, path))
        return r.tokens_per_second if r else None

    def ratio(level: int, top: str, bottom: str) -> float | None:
        a, b = rate(level, top), rate(level, bottom)
        return a / b if a and b else None

    ratios = [(f"{t}/{b}", t, b) for t, b in (("b", "a"), ("b-ref", "a"), ("b", "b-ref"),
                                              ("b", "c"), ("b", "c-stock"), ("a", "a-builtin"))
              if t in paths and b in paths]
    header = (["C"] + [f"{PATH_NAMES[p]} tok/s" for p in paths]
              + [f"{PATH_NAMES[p]} TTFT p50 ms" for p in paths] + [name for name, _, _ in ratios])
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for level in levels:
        row = [str(level)]
        row += [cell(rate(level, p), ".1f") for p in paths]
        row += [cell(results[(level, p)].p50_ttft_ms if results.get((level, p)) else None, ".0f")
                for p in paths]
        row += [cell(ratio(level, t, b), ".2f") for _, t, b in ratios]
        rows.append("| " + " | ".join(row) + " |")
    return "\n".join(rows)


def work_note(results: dict[tuple[int, str], Result | None], levels: list[int],
              paths: list[str]) -> str:
    """Tokens generated per path: equal work is what makes the rates comparable."""
    parts = []
    for level in levels:
        counts = ", ".join(f"{p} {results[(level, p)].tokens}" for p in paths
                           if results.get((level, p)))
        parts.append(f"C={level}: {counts}")
    return "Tokens generated — " + "; ".join(parts)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append",
                        help="bundled, random, random-0.6b, all, or a model directory; repeatable "
                             "(default: all)")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                        help="comma-separated levels (default: 1,8,32; smoke: 1,2)")
    parser.add_argument("--requests", type=int,
                        help="requests per concurrency level (default: 64; smoke: 4)")
    parser.add_argument("--max-tokens", type=int,
                        help="max output tokens per request (default: 64; smoke: 8)")
    parser.add_argument("--paths", type=lambda s: s.split(","), default=list(PATHS),
                        help=f"which of {','.join(PATHS)} to run (default: all)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure every path this many times per level, the paths "
                             "interleaved, and report each path's median run (default: 1)")
    parser.add_argument("--smoke", action="store_true", help="a tiny configuration, to check")
    parser.add_argument("--blas", choices=("auto", "none"), default="auto",
                        help="BLAS for the in-process path (a); the a-builtin path uses none")
    parser.add_argument("--triode-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for the triode server (b) only; repeatable")
    parser.add_argument("--ref-src", type=Path, metavar="DIR",
                        help="a triode source tree (e.g. `git worktree add DIR OLD`) that the "
                             "b-ref path serves, to compare two commits in one run")
    parser.add_argument("--raw-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    TRIODE_ENV.update(item.split("=", 1) for item in args.triode_env)
    smoke = args.smoke
    args.model = args.model or ["all"]
    args.concurrency = args.concurrency or ([1, 2] if smoke else [1, 8, 32])
    args.requests = args.requests or (4 if smoke else 64)
    args.max_tokens = args.max_tokens or (8 if smoke else 64)
    unknown = set(args.paths) - set(PATHS)
    if unknown:
        parser.error(f"--paths: unknown {', '.join(sorted(unknown))}; choose from {PATHS}")
    if ("b-ref" in args.paths) != (args.ref_src is not None):
        parser.error("the b-ref path and --ref-src go together")
    if args.ref_src is not None:
        if not (args.ref_src / "src" / "triode").is_dir():
            parser.error(f"--ref-src: {args.ref_src} has no src/triode")
        REF_SRC.append(args.ref_src.resolve())
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # TERM (and INT, which a shell's `&` sets to ignored) become KeyboardInterrupt, so every
    # `finally` runs and no server is left behind. TERM goes through SIGINT's handler because
    # inside trio.run that is trio's, which raises the KeyboardInterrupt at a safe point.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))

    # Before anything imports mlx: the preload cannot be undone later in this process.
    from triode.model.blas import preload_blas, sgemm_provider

    blas = preload_blas(args.blas)
    if args.raw_worker:
        return raw_worker(args)

    command = shlex.join([os.path.relpath(sys.executable, Path.cwd()),
                          os.path.relpath(__file__, Path.cwd()), *sys.argv[1:]])
    paths = [p for p in PATHS if p in args.paths]
    prompts = make_prompts(args.requests)
    output: list[str] = []
    with ExitStack() as cleanup:
        scratch = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="triode-bench-")))
        models = resolve_models(args.model, scratch)
        import mlx.core as mx   # after the preload
        import mlx_lm

        output += [f"Command: `{command}`", "",
                   f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.machine()}, "
                   f"{os.cpu_count()} cores, mlx {mx.__version__}, mlx-lm {mlx_lm.__version__}, "
                   f"BLAS for (a)/(b)/(c): {blas} (cblas_sgemm from {sgemm_provider()}). "
                   f"{args.requests} requests per level, {args.max_tokens} max output tokens, "
                   "greedy, prompts `Reply with: <3-6 words>`"
                   + (f"; each path measured {args.repeat} times per level, interleaved, "
                      "median run shown" if args.repeat > 1 else "") + ".", ""]
        for label, model_dir in models:
            results: dict[tuple[int, str], Result | None] = {}
            for level in args.concurrency:
                runs: dict[str, list[Result]] = {p: [] for p in paths}
                for repeat, path in [(r, p) for r in range(args.repeat) for p in paths]:
                    log(f"{label} C={level} {PATH_NAMES[path]}"
                        + (f" (run {repeat + 1}/{args.repeat})" if args.repeat > 1 else "")
                        + " ...")
                    server_log = scratch / f"{path}-{level}.log"
                    try:
                        if path == "a":
                            result = measure_raw(model_dir, prompts, level, args.max_tokens)
                        elif path == "a-builtin":
                            result = measure_raw_builtin_blas(model_dir, prompts, level,
                                                              args.max_tokens)
                        elif path in ("b", "b-ref"):
                            server = triode_server if path == "b" else triode_ref_server
                            result = measure_server(server, one_triode_request,
                                                    model_dir, prompts, level, args.max_tokens,
                                                    server_log)
                        else:
                            server = (mlx_lm_server if path == "c" else
                                      functools.partial(mlx_lm_server, stock=True))
                            result = measure_server(server, chat_request_for(model_dir),
                                                    model_dir, prompts, level, args.max_tokens,
                                                    server_log)
                    except Exception:
                        # One broken path should not throw away the others' numbers.
                        log(traceback.format_exc())
                        result = None
                    if result:
                        runs[path].append(result)
                        log(f"  {result.tokens} tokens in {result.seconds:.2f}s = "
                            f"{result.tokens_per_second:.1f} tok/s, "
                            f"p50 TTFT {result.p50_ttft_ms:.0f} ms")
                for path in paths:
                    results[(level, path)] = median_run(runs[path])
            params = parameter_count(model_dir) / 1e6
            title = label if label in ("bundled", "random") else f"`{model_dir}`"
            threads = blas_threads_for(model_dir) or "MKL's default"
            output += [f"### {title} ({params:.1f}M parameters)", "",
                       f"MKL threads for (a), (b) and (c): {threads} (triode's "
                       "`--blas-threads 0` rule)", "",
                       markdown_table(results, args.concurrency, paths), "",
                       work_note(results, args.concurrency, paths), ""]
    print("\n".join(output))
    return 0


def chat_request_for(model_dir: Path):
    """The (c) request function; counts tokens itself only if the server reports no usage."""
    tokenizer = None

    def count_tokens(text: str) -> int:
        nonlocal tokenizer
        if tokenizer is None:
            from mlx_lm.utils import load_tokenizer

            tokenizer = load_tokenizer(model_dir)
        return len(tokenizer.encode(text, add_special_tokens=False))

    return lambda client, prompt, max_tokens: one_chat_request(client, prompt, max_tokens,
                                                               count_tokens)


if __name__ == "__main__":
    sys.exit(main())
