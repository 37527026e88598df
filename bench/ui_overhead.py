#!/usr/bin/env python
"""What open live pages (`/ui`) cost the server: its CPU while idle, and request throughput
and CPU per request under load, with 0 and with V readers of `/ui/events`, in one run.

    PYTHONPATH=src python bench/ui_overhead.py [--viewers 4] [--seconds 15] [--rounds 3]

One server (bundled model, --parallel 4). Each round measures, viewers off and on in turn:
idle CPU (the server process's utime + stime from /proc, all threads, per second of wall
time) over --seconds, then --clients closed-loop clients sending short non-streamed requests
(max_output_tokens 8) for --seconds: requests per second and CPU per request. A viewer is
what the page does: a GET /ui/events with `Accept: text/event-stream`, read as it comes.
Prints each round and the medians' ratios (with viewers / without).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import threading
import time

import httpx

import serving

MODEL = "triode-tiny"


def start() -> tuple[subprocess.Popen[str], str]:
    return serving.start("--parallel", "4")


def cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().split(")")[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Viewers:
    """V readers of the page's stream, counting the bytes they get."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.n = url, n
        self.stop = threading.Event()
        self.bytes = 0
        self.threads = [threading.Thread(target=self.read, daemon=True) for _ in range(n)]

    def read(self) -> None:
        with httpx.Client(base_url=self.url, timeout=None) as client, \
                client.stream("GET", "/ui/events",
                              headers={"Accept": "text/event-stream"}) as r:
            for chunk in r.iter_bytes():
                self.bytes += len(chunk)
                if self.stop.is_set():
                    return

    def __enter__(self) -> Viewers:
        for t in self.threads:
            t.start()
        time.sleep(0.5)   # connected, first snapshot sent
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()


def load(url: str, clients: int, seconds: float) -> int:
    done = [0] * clients
    deadline = time.monotonic() + seconds

    def client(i: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while time.monotonic() < deadline:
                r = http.post("/v1/responses", json={"model": MODEL, "max_output_tokens": 8,
                                                     "input": f"Reply with: w{i}x{done[i]}"})
                assert r.status_code == 200, r.text
                done[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done)


def measure(proc: subprocess.Popen[str], url: str, seconds: float, clients: int
            ) -> tuple[float, float, float]:
    """(idle CPU s/s, requests/s, CPU ms/request)."""
    c0, w0 = cpu(proc.pid), time.monotonic()
    time.sleep(seconds)
    idle = (cpu(proc.pid) - c0) / (time.monotonic() - w0)
    c0, w0 = cpu(proc.pid), time.monotonic()
    n = load(url, clients, seconds)
    wall, used = time.monotonic() - w0, cpu(proc.pid) - c0
    return idle, n / wall, used / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--viewers", type=int, default=4)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    proc, url = start()
    try:
        load(url, args.clients, 3.0)   # warm-up
        results: dict[str, list[tuple[float, float, float]]] = {"off": [], "on": []}
        for rnd in range(args.rounds):
            for mode in ("off", "on"):
                if mode == "on":
                    with Viewers(url, args.viewers) as viewers:
                        got = measure(proc, url, args.seconds, args.clients)
                    extra = f", {viewers.bytes / 1000 / (2 * args.seconds):.1f} kB/s to the viewers"
                else:
                    got = measure(proc, url, args.seconds, args.clients)
                    extra = ""
                results[mode].append(got)
                print(f"round {rnd} viewers {args.viewers if mode == 'on' else 0}: idle "
                      f"{got[0] * 100:.1f}% CPU, {got[1]:.1f} req/s, {got[2]:.1f} ms CPU/req"
                      f"{extra}", flush=True)
        med = {mode: [statistics.median(r[i] for r in rs) for i in range(3)]
               for mode, rs in results.items()}
        off, on = med["off"], med["on"]
        print(f"medians: idle CPU {off[0] * 100:.1f}% -> {on[0] * 100:.1f}% with "
              f"{args.viewers} viewers; req/s ratio (on/off) {on[1] / off[1]:.3f}; "
              f"CPU/request ratio {on[2] / off[2]:.3f}")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
