"""One rank against two: triode `--distributed pipeline|tensor` on loopback (MLX's ring
backend, every rank started by `mlx.launch`) against one triode process, against
`mlx_lm.server` sharded the same way (its `--pipeline` flag, under the same launcher), and
against mlx-lm's own generation in this process, on the same random-weight Qwen2 weights.

    .venv/bin/python bench/distributed.py [--rounds 3] [--tokens 128]

Each round runs every server once, one at a time, in the same order: a warm-up request, one
stream of TOKENS greedy tokens (time to first token, decode tokens/s) and four concurrent
streams (their tokens/s together), over Chat Completions (both servers speak it; the same
client code measures both). The medians over the rounds and their ratios are printed. Then
the step time split: each triode rank's time in forward passes (compute and the model's own
collectives) and in the step records' collectives, per step, from /health; and the latency
of one collective the size of one token's hidden state, measured by two ranks alone.

The ranks are started as mlx.launch starts them (MLX_RANK and MLX_HOSTFILE), not by
mlx.launch: its output relay busy-polls about a core (measured with top: 120% CPU while the
ranks idle), which two ranks on this two-core machine cannot spare.

The weights are random (speed does not depend on them): a Qwen2 of ~140M parameters built
with mlx-lm's own class into a cache outside the repository. This machine's two ranks share
its two cores, so the figures say what the lockstep costs, not what a second machine gains
(docs/deployment.md reads them for two machines).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import stop  # noqa: E402  (SIGTERM, then SIGKILL)
from tests.fixtures.distributed import build_qwen2  # noqa: E402  (the model)

CACHE = Path(os.environ.get("TRIODE_BENCH_CACHE", Path.home() / ".cache" / "triode-bench"))
CONFIG = dict(hidden_size=1024, num_hidden_layers=8, intermediate_size=2816,
              num_attention_heads=16, num_key_value_heads=8, rms_norm_eps=1e-6,
              max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=True)
PROMPT = "Write a long story about a lighthouse keeper and the ships she counts each night."
SERVERS = ("triode", "triode pipeline", "triode tensor", "mlx_lm.server pipeline",
           "mlx_lm.server tensor")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def bench_model() -> Path:
    """The bench's Qwen2 (cached): the fixture's tokenizer and template, larger shapes."""
    out = CACHE / "qwen2-140m"
    if not (out / "model.safetensors.index.json").exists():
        log(f"building {out}")
        build_qwen2(out, **CONFIG)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server under test: its rank processes (one, or two on loopback started as
    mlx.launch starts them: MLX_RANK and MLX_HOSTFILE; not through mlx.launch itself, whose
    output relay busy-polls a core here, which two ranks on two cores cannot spare) and
    rank 0's base URL."""

    def __init__(self, kind: str, model: Path):
        self.kind = kind
        self.port = free_port()
        name, _, mode = kind.partition(" ")
        if name == "triode":
            command = [sys.executable, "-m", "triode", "serve", "--model", str(model),
                       "--port", str(self.port), "--speculative", "off",
                       "--log-level", "warning"]
            if mode:   # two ranks share this machine's cores: one BLAS thread each
                command += ["--distributed", mode, "--blas-threads", "1"]
        else:
            command = [sys.executable, "-m", "mlx_lm.server", "--model", str(model),
                       "--port", str(self.port), "--log-level", "WARNING"]
            if mode == "pipeline":
                command.append("--pipeline")
        self.logs = [tempfile.TemporaryFile() for _ in range(2 if mode else 1)]
        env = dict(os.environ)
        if mode:
            self.hosts = tempfile.NamedTemporaryFile("w", suffix=".json")
            json.dump([[f"127.0.0.1:{free_port()}"] for _ in range(2)], self.hosts)
            self.hosts.flush()
            env["MLX_HOSTFILE"] = self.hosts.name
        self.procs = [subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                       env={**env, "MLX_RANK": str(rank)} if mode else env)
                      for rank, out in enumerate(self.logs)]
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                self.logs[0].seek(0)
                raise RuntimeError(f"{kind} exited:\n{self.logs[0].read().decode()[-2000:]}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{kind} did not start")

    def stop(self) -> None:
        for proc in self.procs:   # rank 0 first: triode's other ranks end with it
            stop(proc, 30)


def stream(url: str, model: str, tokens: int, nonce: int) -> tuple[int, float, float]:
    """One greedy Chat Completions stream: (tokens, time to first token, total time)."""
    body = {"model": model, "messages": [{"role": "user", "content": f"{nonce}. {PROMPT}"}],
            "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first = None
    usage: dict[str, Any] = {}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and any(c.get("delta", {}).get("content")
                                     for c in chunk.get("choices", [])):
                first = time.perf_counter() - start
            usage = chunk.get("usage") or usage
    total = time.perf_counter() - start
    return int(usage.get("completion_tokens", 0)), first if first is not None else total, total


def measure(server: Server, model: str, tokens: int, run: int) -> dict[str, float]:
    stream(server.url, model, 8, -1)   # warm
    n, ttft, total = stream(server.url, model, tokens, run)
    out = {"TTFT s": ttft, "decode tokens/s (1 stream)": (n - 1) / max(1e-9, total - ttft)}
    results: list[tuple[int, float, float]] = []

    def one(i: int) -> None:
        results.append(stream(server.url, model, tokens, 100 * run + i))

    began = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["tokens/s (4 streams)"] = sum(r[0] for r in results) / (time.perf_counter() - began)
    if server.kind.startswith("triode "):
        d = httpx.get(server.url + "/health", timeout=10).json()["distributed"]
        for r in d["ranks"]:
            if r["steps"]:
                out[f"rank {r['rank']} forward ms/step"] = 1000 * r["step_seconds"] / r["steps"]
                out[f"rank {r['rank']} record ms/step"] = 1000 * r["record_seconds"] / r["steps"]
    return out


def in_process(model: Path, tokens: int) -> dict[str, float]:
    """mlx-lm's own generation on the same weights, in this process."""
    import mlx_lm
    from mlx_lm.generate import stream_generate

    loaded, tokenizer = mlx_lm.load(str(model))[:2]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"0. {PROMPT}"}],
                                           add_generation_prompt=True)
    last = None
    for last in stream_generate(loaded, tokenizer, prompt, max_tokens=tokens):
        pass
    assert last is not None
    return {"decode tokens/s (1 stream)": last.generation_tps}


COLLECTIVE = """
import time, mlx.core as mx
g = mx.distributed.init(strict=True)
x = mx.ones((1, 1, {hidden}), dtype=mx.float32)
for _ in range(20):
    mx.eval(mx.distributed.all_sum(x, stream=mx.cpu))
start = time.perf_counter()
for _ in range(500):
    mx.eval(mx.distributed.all_sum(x, stream=mx.cpu))
if g.rank() == 0:
    print("COLLECTIVE", (time.perf_counter() - start) / 500)
"""


def collective_seconds(hidden: int) -> float:
    """One all_sum's time between two ranks on loopback (started as the servers are)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as hosts:
        json.dump([[f"127.0.0.1:{free_port()}"] for _ in range(2)], hosts)
        hosts.flush()
        procs = [subprocess.Popen([sys.executable, "-c", COLLECTIVE.format(hidden=hidden)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**os.environ, "MLX_RANK": str(rank),
                                       "MLX_HOSTFILE": hosts.name})
                 for rank in range(2)]
        out = [p.communicate(timeout=300)[0] for p in procs]
    found = re.search(r"COLLECTIVE (\S+)", out[0])
    if found is None:
        raise RuntimeError("".join(out))
    return float(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--servers", default=",".join(SERVERS))
    args = parser.parse_args(argv)
    model = bench_model()
    kinds = args.servers.split(",")
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for run in range(args.rounds):
        for kind in kinds:
            log(f"round {run + 1}: {kind}")
            server = Server(kind, model)
            try:
                runs[kind].append(measure(server, str(model), args.tokens, run))
            finally:
                server.stop()
    log("mlx-lm in process")
    runs["mlx-lm in process"] = [in_process(model, args.tokens) for _ in range(args.rounds)]
    hidden = CONFIG["hidden_size"]
    collective = collective_seconds(hidden)

    def median(kind: str, figure: str) -> float | None:
        values = [r[figure] for r in runs.get(kind, []) if figure in r]
        return statistics.median(values) if values else None

    figures = list(dict.fromkeys(f for rs in runs.values() for r in rs for f in r))
    print(f"# {args.rounds} rounds, {args.tokens} tokens, Qwen2 {CONFIG['num_hidden_layers']} "
          f"layers x {hidden} (random weights), two ranks on loopback\n")
    print("| figure | " + " | ".join(runs) + " |")
    print("|---|" + "---|" * len(runs))
    for figure in figures:
        cells = [median(k, figure) for k in runs]
        print(f"| {figure} | " + " | ".join("" if c is None else f"{c:.4g}" for c in cells)
              + " |")
    print("\n| ratio | value |\n|---|---|")
    for figure in ("decode tokens/s (1 stream)", "tokens/s (4 streams)", "TTFT s"):
        one = median("triode", figure)
        for mode in ("pipeline", "tensor"):
            two = median(f"triode {mode}", figure)
            peer = median(f"mlx_lm.server {mode}", figure)
            if one and two:
                print(f"| triode {mode} / triode one process, {figure} | {two / one:.3f} |")
            if two and peer:
                print(f"| triode {mode} / mlx_lm.server {mode}, {figure} | {two / peer:.3f} |")
    ours, theirs = median("triode", "decode tokens/s (1 stream)"), \
        median("mlx-lm in process", "decode tokens/s (1 stream)")
    if ours and theirs:
        print(f"| triode one process / mlx-lm in process, decode tokens/s | {ours / theirs:.3f} |")
    print(f"\none all_sum of a token's hidden state ({hidden} float32) between two ranks on "
          f"loopback: {collective * 1000:.3f} ms")
    print(f"collectives per decode step: tensor {2 * CONFIG['num_hidden_layers']} "
          "(two per layer), pipeline 2 (the hand-over and the closing all_gather); the step "
          "record goes over the control link (TCP), not a collective")
    return 0


if __name__ == "__main__":
    sys.exit(main())
