#!/usr/bin/env python
"""What tenants cost a request, and how soon an early answer comes, in one run.

    .venv/bin/python bench/tenants.py [--tenants 1000] [--n 300]

Three servers on the bundled model: `--api-key` (one key), `--api-keys-file` with
--tenants tenants (the key used is the last one's: every digest is compared anyway) and the
same file with a requests_per_minute limit on that tenant (so each request also counts in
the limiter); requests interleaved server by server so that machine noise falls on all
alike. Measures, per server, the p50 of `GET /v1/models` (authentication is most of what it
does) and of a stored create (`max_output_tokens` 2); prints each p50 against --api-key's.

Then the early answer: a raw client sends `POST /v1/responses` headers with a
Content-Length and no body and waits; the time to its 401's first byte is printed (before
the connection guard sent early answers at once, this was its 5 s drain bound).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx

import serving

MODEL = "triode-tiny"


def start(*flags: str) -> tuple[subprocess.Popen[str], str]:
    return serving.start("--access-log", "off", *flags)


def timed(client: httpx.Client, method: str, path: str, **kw: object) -> float:
    t = time.perf_counter()
    r = client.request(method, path, **kw)
    elapsed = time.perf_counter() - t
    assert r.status_code == 200, r.text
    return elapsed


def early_401(url: str) -> float:
    """Seconds from sending headers (no body) to the 401's first byte."""
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port)) as sock:
        sock.settimeout(30)
        t = time.perf_counter()
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100\r\n\r\n")
        head = sock.recv(64)
        elapsed = time.perf_counter() - t
    assert head.startswith(b"HTTP/1.1 401"), head
    return elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tenants", type=int, default=1000)
    p.add_argument("--n", type=int, default=300)
    args = p.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="triode-bench-"))
    last = f"sk-{args.tenants - 1}"
    tenants = {f"t{i}": {"keys": [f"sk-{i}"]} for i in range(args.tenants)}
    plain = directory / "keys.json"
    plain.write_text(json.dumps({"tenants": tenants}))
    limited = directory / "limited.json"
    limited.write_text(json.dumps({"tenants": {
        **tenants, f"t{args.tenants - 1}": {"keys": [last], "requests_per_minute": 10**9}}}))
    flags = {"api-key": ("--api-key", last), "keys-file": ("--api-keys-file", str(plain)),
             "keys-file+rpm": ("--api-keys-file", str(limited))}
    servers = {name: start(*f) for name, f in flags.items()}
    clients = {name: httpx.Client(base_url=url, timeout=60,
                                  headers={"Authorization": f"Bearer {last}"})
               for name, (_, url) in servers.items()}
    times: dict[str, dict[str, list[float]]] = {n: {"models": [], "create": []}
                                                for n in servers}
    body = {"model": MODEL, "input": "Reply with: amber 77 kite", "max_output_tokens": 2}
    try:
        for i in range(args.n + 20):   # the first 20 warm up
            for name, client in clients.items():
                t_models = timed(client, "GET", "/v1/models")
                t_create = timed(client, "POST", "/v1/responses", json=body)
                if i >= 20:
                    times[name]["models"].append(t_models)
                    times[name]["create"].append(t_create)
        early = [early_401(servers["keys-file"][1]) for _ in range(5)]
    finally:
        for client in clients.values():
            client.close()
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    print(f"{args.n} requests each, {args.tenants} tenants in the file")
    base = {kind: statistics.median(times["api-key"][kind]) for kind in ("models", "create")}
    for name, kinds in times.items():
        row = []
        for kind, values in kinds.items():
            p50 = statistics.median(values)
            row.append(f"{kind} p50 {p50 * 1000:.2f} ms ({p50 / base[kind]:.2f}x)")
        print(f"{name:>14}: " + ", ".join(row))
    print(f"early 401 (headers, no body): median {statistics.median(early) * 1000:.1f} ms "
          f"over {len(early)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
