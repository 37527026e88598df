#!/usr/bin/env python
"""What a shared or durable store adds to a request: in-memory vs `--store redis://` vs
`--store sqlite:///` (synchronous=normal, the default, and synchronous=full), in one run.

    .venv/bin/python bench/store_latency.py [--stores memory,redis,sqlite,sqlite-full]
        [--redis redis://127.0.0.1:6379/0] [--sqlite-dir DIR] [--n 200]

One server on the bundled model per store, the same requests to each, interleaved request by
request so that machine noise falls on all alike: a stored create (`max_output_tokens` 2, not
streamed), a GET of it, and a chained create (`previous_response_id`, which reads the stored
chain). Prints the p50 and p90 of each per store, and each store's p50 added to memory's. The
Redis keys live under a fresh prefix, deleted at the end; the SQLite files in a fresh
directory under --sqlite-dir (default: the system's temporary directory; the fsync cost of
synchronous=full depends on that disk), removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import httpx

import serving

MODEL = "triode-tiny"
KINDS = ("create", "get", "chained")


def start(*flags: str) -> tuple[subprocess.Popen[str], str]:
    return serving.start("--access-log", "off", *flags)


def timed(client: httpx.Client, method: str, path: str, **kw: object) -> tuple[float, dict]:
    t = time.perf_counter()
    r = client.request(method, path, **kw)
    elapsed = time.perf_counter() - t
    assert r.status_code == 200, r.text
    return elapsed, r.json()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--stores", default="memory,redis,sqlite,sqlite-full")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--sqlite-dir", default=None)
    p.add_argument("--n", type=int, default=200)
    args = p.parse_args()
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    directory = tempfile.mkdtemp(prefix="triode-bench-", dir=args.sqlite_dir)
    flags = {
        "memory": (),
        "redis": ("--store", args.redis, "--store-prefix", prefix),
        "sqlite": ("--store", f"sqlite:///{directory}/normal.db"),
        "sqlite-full": ("--store", f"sqlite:///{directory}/full.db?synchronous=full"),
    }
    names = ["memory", *(n for n in args.stores.split(",") if n != "memory")]
    servers = {name: start(*flags[name]) for name in names}
    clients = {name: httpx.Client(base_url=url, timeout=60) for name, (_, url) in servers.items()}
    times: dict[str, dict[str, list[float]]] = {n: {k: [] for k in KINDS} for n in servers}
    body = {"model": MODEL, "input": "Reply with: amber 77 kite", "max_output_tokens": 2}
    try:
        for i in range(args.n + 20):   # the first 20 warm up
            for name, client in clients.items():
                t_create, created = timed(client, "POST", "/v1/responses", json=body)
                t_get, _ = timed(client, "GET", f"/v1/responses/{created['id']}")
                t_chain, _ = timed(client, "POST", "/v1/responses",
                                   json={**body, "previous_response_id": created["id"]})
                if i >= 20:
                    for kind, t in zip(KINDS, (t_create, t_get, t_chain)):
                        times[name][kind].append(t)
        print(f"{args.n} of each, interleaved; milliseconds (p50, p90, p50 added to memory's)")
        print(f"{'request':10s} " + " ".join(f"{n + ' p50':>16s} {'p90':>7s} {'+ms':>6s}"
                                              for n in names))
        for kind in KINDS:
            base = statistics.median(times["memory"][kind]) * 1e3
            cells = []
            for name in names:
                got = times[name][kind]
                p50 = statistics.median(got) * 1e3
                p90 = statistics.quantiles(got, n=10)[-1] * 1e3
                cells.append(f"{p50:16.2f} {p90:7.2f} {p50 - base:+6.2f}")
            print(f"{kind:10s} " + " ".join(cells))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(20)
        shutil.rmtree(directory, ignore_errors=True)
        if "redis" in names:
            import redis

            client = redis.Redis.from_url(args.redis)
            keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
