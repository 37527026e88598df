#!/usr/bin/env python
"""Where the CPU goes: CPU time per generated token by thread, and how (a) reacts to load.

    .venv/bin/python bench/cpu_share.py --model bundled --concurrency 1,32 --repeat 3

At each concurrency level, the paths interleaved and each measured `--repeat` times (the
median run is shown), with throughput.py's prompts and settings:

    (a)              mlx-lm's BatchGenerator in this process (throughput.py's path (a))
    (a) + N% load    the same, while another process keeps N% of one core busy (a duty cycle
                     of 2 ms periods): what other work on the machine costs mlx-lm's loop
    (a) one core     the same in a subprocess pinned to one core (its MLX stream thread too)
    (b)              triode over HTTP + SSE (throughput.py's path (b)), the server's threads
                     read from /proc/<pid>/task and the bench client's own CPU time

CPU is reported in ms per generated token: the model's threads (for (a) the Python thread
that drives mlx-lm plus MLX's CPU stream thread; for (b) the engine thread plus its MLX stream
thread), triode's trio thread, its other threads (chat-template workers), and the client.
Linux only (/proc). Markdown to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput as T  # noqa: E402  (the bench's own module, next to this file)

BURN_PERIOD = 0.002   # seconds: one duty cycle of the load process
LOADS = (30, 60)      # percent of one core
COLUMNS = ("model: Python thread", "model: MLX stream thread(s)",
           "model: engine + MLX stream thread", "trio thread", "other server threads",
           "bench client")


@dataclass
class Measured:
    tokens_per_second: float
    cpu_ms_per_token: dict[str, float] = field(default_factory=dict)


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, user + system CPU seconds) for every thread of `pid`."""
    tick = os.sysconf("SC_CLK_TCK")
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:
            continue   # ended meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        threads[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return threads


def cpu_spent(before: dict, after: dict) -> dict[int, tuple[str, float]]:
    return {tid: (name, seconds - before.get(tid, ("", 0.0))[1])
            for tid, (name, seconds) in after.items()}


def raw_in_process(model_dir: Path, prompts: list[str], level: int,
                   max_tokens: int) -> Measured:
    # Loads the model (the first time) outside the measured window.
    T.measure_raw(model_dir, [T.WARMUP_PROMPT] * level, level, T.WARMUP_TOKENS)
    pid = os.getpid()
    before = thread_cpu(pid)
    result = T.measure_raw(model_dir, prompts, level, max_tokens)
    spent = cpu_spent(before, thread_cpu(pid))
    model = sum(s for tid, (_, s) in spent.items())   # nothing else runs in this process
    main = spent[pid][1]
    per_token = 1000 / result.tokens
    return Measured(result.tokens_per_second, {
        "model: Python thread": main * per_token,
        "model: MLX stream thread(s)": (model - main) * per_token,
    })


def raw_with_load(model_dir: Path, prompts: list[str], level: int, max_tokens: int,
                  percent: int) -> Measured:
    burn = (f"import time\nbusy, period = {percent / 100 * BURN_PERIOD!r}, {BURN_PERIOD!r}\n"
            "while True:\n    t = time.perf_counter()\n"
            "    while time.perf_counter() - t < busy: pass\n"
            "    time.sleep(period - busy)\n")
    with T.child_process([sys.executable, "-c", burn]):
        return raw_in_process(model_dir, prompts, level, max_tokens)


def raw_on_one_core(model_dir: Path, level: int, requests: int, max_tokens: int) -> Measured:
    cmd = [sys.executable, __file__, "--pinned-worker", "--model", str(model_dir),
           "--concurrency", str(level), "--requests", str(requests),
           "--max-tokens", str(max_tokens)]
    with T.child_process(cmd, stdout=subprocess.PIPE) as proc:
        out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"pinned worker exited with {proc.returncode}")
    return Measured(**json.loads(out.strip().splitlines()[-1]))


def pinned_worker(args: argparse.Namespace) -> int:
    """The subprocess side of raw_on_one_core: pinned before MLX starts its threads."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    prompts = T.make_prompts(args.requests)
    measured = raw_in_process(Path(args.model), prompts, args.concurrency[0], args.max_tokens)
    print(json.dumps(asdict(measured)))
    return 0


def triode(model_dir: Path, prompts: list[str], level: int, max_tokens: int,
           log_path: Path) -> Measured:
    with T.triode_process(model_dir, level, log_path) as (url, proc):
        T.drive_http(url, lambda c, p: T.one_triode_request(c, p, T.WARMUP_TOKENS),
                     [T.WARMUP_PROMPT] * level, level)
        before, client_before = thread_cpu(proc.pid), time.process_time()
        result = T.drive_http(url, lambda c, p: T.one_triode_request(c, p, max_tokens),
                              prompts, level)
        spent, client = cpu_spent(before, thread_cpu(proc.pid)), \
            time.process_time() - client_before
    per_token = 1000 / result.tokens
    groups = {"model: engine + MLX stream thread": 0.0, "trio thread": 0.0,
              "other server threads": 0.0}
    for tid, (name, seconds) in spent.items():
        if tid == proc.pid:
            groups["trio thread"] += seconds
        elif "_run_engine" in name or name.startswith("run from triode"):
            # trio names the engine's thread after its function; MLX's stream thread, which
            # the engine thread starts, inherits that name.
            groups["model: engine + MLX stream thread"] += seconds
        else:
            groups["other server threads"] += seconds
    return Measured(result.tokens_per_second,
                    {**{k: v * per_token for k, v in groups.items()},
                     "bench client": client * per_token})


def median_measure(runs: list[Measured]) -> Measured | None:
    if not runs:
        return None
    ranked = sorted(runs, key=lambda m: m.tokens_per_second)
    return ranked[(len(ranked) - 1) // 2]


def table(results: dict[str, Measured | None], reference: Measured | None) -> str:
    present = {k for m in results.values() if m for k in m.cpu_ms_per_token}
    columns = [c for c in COLUMNS if c in present]
    lines = ["| path | tok/s | vs (a) | " + " | ".join(f"{c} ms/token" for c in columns)
             + " | total ms/token |",
             "|---" * (len(columns) + 4) + "|"]
    for path, m in results.items():
        if m is None:
            lines.append(f"| {path} | failed |" + " |" * (len(columns) + 2))
            continue
        ratio = f"{m.tokens_per_second / reference.tokens_per_second:.2f}" if reference else "-"
        cells = [f"{m.cpu_ms_per_token[c]:.2f}" if c in m.cpu_ms_per_token else ""
                 for c in columns]
        lines.append(f"| {path} | {m.tokens_per_second:.1f} | {ratio} | " + " | ".join(cells)
                     + f" | {sum(m.cpu_ms_per_token.values()):.2f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="bundled",
                        help="bundled, random, or a model directory (default: bundled)")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 32], help="comma-separated levels (default: 1,32)")
    parser.add_argument("--requests", type=int, default=256,
                        help="requests per measurement (default: 256)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pinned-worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path("/proc/self/task").is_dir():
        print("cpu_share.py reads per-thread CPU from /proc: Linux only", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    from triode.model.blas import preload_blas

    blas = preload_blas("auto")   # before mlx is imported, as throughput.py does
    if args.pinned_worker:
        return pinned_worker(args)
    command = shlex.join([os.path.relpath(sys.executable, Path.cwd()),
                          os.path.relpath(__file__, Path.cwd()), *sys.argv[1:]])
    prompts = T.make_prompts(args.requests)
    output = [f"Command: `{command}`", "",
              f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, BLAS {blas}; "
              f"{args.requests} requests per run, {args.max_tokens} max output tokens, "
              f"each path {args.repeat} times per level, interleaved, median run shown.", ""]
    with ExitStack() as cleanup:
        scratch = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="triode-cpu-")))
        ((label, model_dir),) = T.resolve_models([args.model], scratch)
        paths = {"(a)": lambda level: raw_in_process(model_dir, prompts, level, args.max_tokens),
                 **{f"(a) + {p}% load": (lambda level, p=p: raw_with_load(
                     model_dir, prompts, level, args.max_tokens, p)) for p in LOADS},
                 "(a) one core": lambda level: raw_on_one_core(model_dir, level, args.requests,
                                                               args.max_tokens),
                 "(b) triode": lambda level: triode(model_dir, prompts, level, args.max_tokens,
                                                    scratch / f"triode-{level}.log")}
        for level in args.concurrency:
            runs: dict[str, list[Measured]] = {p: [] for p in paths}
            for repeat in range(args.repeat):
                for path, measure in paths.items():
                    T.log(f"{label} C={level} {path} (run {repeat + 1}/{args.repeat}) ...")
                    try:
                        m = measure(level)
                    except Exception as exc:   # one broken path keeps the others' numbers
                        T.log(f"  failed: {type(exc).__name__}: {exc}")
                        continue
                    runs[path].append(m)
                    T.log(f"  {m.tokens_per_second:.1f} tok/s, CPU ms/token "
                          + ", ".join(f"{k} {v:.2f}" for k, v in m.cpu_ms_per_token.items()))
            results = {p: median_measure(r) for p, r in runs.items()}
            output += [f"### {label}, C={level}", "", table(results, results["(a)"]), ""]
    print("\n".join(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
