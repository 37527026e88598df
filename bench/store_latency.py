#!/usr/bin/env python
"""What a Redis store adds to a request: in-memory vs `--store redis://`, in one run.

    .venv/bin/python bench/store_latency.py [--redis redis://127.0.0.1:6379/0] [--n 200]

Two servers on the bundled model (one per store), the same requests to each, interleaved
request by request so that machine noise falls on both alike: a stored create
(`max_output_tokens` 2, not streamed), a GET of it, and a chained create
(`previous_response_id`, which reads the stored chain). Prints the p50 and p90 of each, the
difference and the ratio Redis / memory. The Redis keys live under a fresh prefix, deleted at
the end.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
import uuid

import httpx

MODEL = "triode-tiny"


def start(*flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "triode", "serve", "--port", "0",
                             "--log-level", "warning", "--access-log", "off", *flags],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            return proc, found.group(1)
    raise RuntimeError("server did not start")


def timed(client: httpx.Client, method: str, path: str, **kw: object) -> tuple[float, dict]:
    t = time.perf_counter()
    r = client.request(method, path, **kw)
    elapsed = time.perf_counter() - t
    assert r.status_code == 200, r.text
    return elapsed, r.json()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    p.add_argument("--n", type=int, default=200)
    args = p.parse_args()
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    servers = {"memory": start(), "redis": start("--store", args.redis, "--store-prefix", prefix)}
    clients = {name: httpx.Client(base_url=url, timeout=60) for name, (_, url) in servers.items()}
    times: dict[str, dict[str, list[float]]] = {n: {"create": [], "get": [], "chained": []}
                                                for n in servers}
    body = {"model": MODEL, "input": "Reply with: amber 77 kite", "max_output_tokens": 2}
    try:
        for i in range(args.n + 20):   # the first 20 warm up
            for name, client in clients.items():
                t_create, created = timed(client, "POST", "/v1/responses", json=body)
                t_get, _ = timed(client, "GET", f"/v1/responses/{created['id']}")
                t_chain, _ = timed(client, "POST", "/v1/responses",
                                   json={**body, "previous_response_id": created["id"]})
                if i >= 20:
                    for kind, t in (("create", t_create), ("get", t_get), ("chained", t_chain)):
                        times[name][kind].append(t)
        print(f"{args.n} of each, interleaved; milliseconds")
        print(f"{'request':10s} {'memory p50':>11s} {'redis p50':>10s} {'+ms':>7s} "
              f"{'ratio':>6s} {'memory p90':>11s} {'redis p90':>10s}")
        for kind in ("create", "get", "chained"):
            m, r = times["memory"][kind], times["redis"][kind]
            m50, r50 = statistics.median(m) * 1e3, statistics.median(r) * 1e3
            m90 = statistics.quantiles(m, n=10)[-1] * 1e3
            r90 = statistics.quantiles(r, n=10)[-1] * 1e3
            print(f"{kind:10s} {m50:11.2f} {r50:10.2f} {r50 - m50:+7.2f} {r50 / m50:6.2f} "
                  f"{m90:11.2f} {r90:10.2f}")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(20)
        import redis

        client = redis.Redis.from_url(args.redis)
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
