#!/usr/bin/env python
"""A bounded soak on loopback: many clients doing what careless and hostile clients do, then
what the server has left: requests by status, 5xx, resets, tasks and RSS before and after,
connections left in CLOSE-WAIT, and every stored stream's replay checked against what the
live stream delivered.

    .venv/bin/python bench/soak.py [--clients 32] [--rounds 4] [--seconds 20]

One server on the bundled model (`--api-key`, `--parallel 8`, `--write-timeout 3`). Each
round runs `--clients` concurrent clients for `--seconds`; each client loops over a random
action:

- stream a create and read it to the end, keeping its events (later replayed and compared);
- stream a create and disconnect after a few events (the response ends `cancelled`);
- stream a create and stop reading (a stalled reader: `--write-timeout` cuts it);
- a plain create; a background create, then poll it and cancel it;
- GET, DELETE, cancel and input_items of stored and unknown ids;
- early answers on a kept-alive connection: a wrong key (401), an unknown route (404), a wrong
  method (405), a body over 64 MiB (413 by its Content-Length), a broken JSON body (400);
- a client that sends its headers and goes away before the body.

Between rounds the server is left idle, then its task count (`/health`) and resident memory
(`/proc/PID/status`) are read. At the end every stored stream is replayed
(`GET /v1/responses/{id}?stream=true`) and compared event for event with the live one.
Exits 1 if anything promised in docs/reliability.md did not hold.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import trio
import httpx

import serving

MODEL = "triode-tiny"
KEY = "soak-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
HOLD = {"model": MODEL, "input": "Reply with: a", "stream": True,
        "text": {"format": {"type": "json_schema", "name": "hold", "strict": True, "schema": {
            "type": "object", "properties": {"a": {"type": "string", "minLength": 2000}},
            "required": ["a"], "additionalProperties": False}}}}
REPLY = {"model": MODEL, "input": "Reply with: amber 77 kite", "max_output_tokens": 16}


SERVER_LOG: list[str] = []


def start() -> tuple[subprocess.Popen[str], str]:
    # What the server logs is checked at the end.
    return serving.start("--access-log", "off", "--api-key", KEY, "--write-timeout", "3",
                         "--shutdown-timeout", "5", log=SERVER_LOG)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def close_wait(port: int) -> int:
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            count += int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "08"
    return count


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


class Soak:
    def __init__(self, base_url: str, seed: int):
        self.base_url = base_url
        url = urlparse(base_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.rng = random.Random(seed)
        self.statuses: collections.Counter[str] = collections.Counter()
        self.resets = 0
        self.timeouts = 0
        self.live_streams: dict[str, list[dict]] = {}
        self.ids: list[str] = []
        self.problems: list[str] = []

    def note(self, action: str, status: int | str) -> None:
        self.statuses[f"{action} {status}"] += 1
        if isinstance(status, int) and status >= 500:
            self.problems.append(f"{action}: {status}")

    # -- actions over httpx (a keep-alive pool per client) --------------------------------

    async def stream_full(self, http: httpx.AsyncClient) -> None:
        body = {**REPLY, "stream": True, "max_output_tokens": self.rng.choice((8, 32, 64))}
        async with http.stream("POST", "/v1/responses", json=body) as r:
            text = (await r.aread()).decode()
        self.note("stream", r.status_code)
        if r.status_code == 200:
            events = sse_events(text)
            rid = events[0]["response"]["id"]
            self.live_streams[rid] = events
            self.ids.append(rid)

    async def stream_disconnect(self, http: httpx.AsyncClient) -> None:
        body = {**HOLD, "max_output_tokens": 400}
        async with http.stream("POST", "/v1/responses", json=body) as r:
            seen = 0
            async for line in r.aiter_lines():
                seen += line.startswith("data: ")
                if seen >= self.rng.randint(1, 20):
                    break
        self.note("stream+disconnect", r.status_code)

    async def create(self, http: httpx.AsyncClient) -> None:
        r = await http.post("/v1/responses", json=REPLY)
        self.note("create", r.status_code)
        if r.status_code == 200:
            self.ids.append(r.json()["id"])

    async def background(self, http: httpx.AsyncClient) -> None:
        r = await http.post("/v1/responses", json={**HOLD, "stream": False, "background": True,
                                                   "max_output_tokens": 300})
        self.note("background", r.status_code)
        if r.status_code != 200:
            return
        rid = r.json()["id"]
        await trio.sleep(self.rng.random() * 0.5)
        self.note("poll", (await http.get(f"/v1/responses/{rid}")).status_code)
        self.note("cancel", (await http.post(f"/v1/responses/{rid}/cancel")).status_code)

    async def reads(self, http: httpx.AsyncClient) -> None:
        rid = self.rng.choice(self.ids) if self.ids and self.rng.random() < 0.7 else "resp_nope"
        for method, path in (("GET", f"/v1/responses/{rid}"),
                             ("GET", f"/v1/responses/{rid}/input_items"),
                             ("POST", f"/v1/responses/{rid}/cancel")):
            self.note(f"{method} {path.replace(rid, '{id}')}",
                      (await http.request(method, path)).status_code)
        if self.rng.random() < 0.2 and rid in self.ids and rid not in self.live_streams:
            self.note("DELETE", (await http.delete(f"/v1/responses/{rid}")).status_code)

    async def early_answers(self, http: httpx.AsyncClient) -> None:
        for name, call in (
                ("401", http.post("/v1/responses", json=REPLY,
                                  headers={"Authorization": "Bearer wrong"})),
                ("404 route", http.post("/v1/assistants", json=REPLY)),
                ("405", http.put("/v1/models", json=REPLY)),
                ("400 json", http.post("/v1/responses", content=b"{not json",
                                       headers={"Content-Type": "application/json"})),
                ("400 field", http.post("/v1/responses", json={**REPLY, "tools": [
                    {"type": ["x"]}]}))):
            self.note(name, (await call).status_code)
        self.note("after early answers", (await http.get("/v1/models")).status_code)

    # -- actions over raw sockets ----------------------------------------------------------

    async def raw(self, head: bytes, *, read: bool) -> bytes:
        sock = trio.socket.socket()
        try:
            await sock.connect((self.host, self.port))
            await sock.send(head)
            if not read:
                return b""
            data = b""
            with trio.move_on_after(10):
                while b"\r\n\r\n" not in data:
                    chunk = await sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            return data
        except ConnectionResetError:
            self.resets += 1
            return b""
        finally:
            sock.close()

    async def oversize(self) -> None:
        head = (f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                f"Content-Length: {64 * 1024 * 1024 + 1}\r\n\r\n").encode()
        data = await self.raw(head, read=True)
        self.note("413", int(data.split()[1]) if data.startswith(b"HTTP/1.1") else "no answer")

    async def gone_before_body(self) -> None:
        head = (f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode()
        await self.raw(head, read=False)
        self.note("gone before body", "sent")

    async def stalled_reader(self) -> None:
        body = json.dumps({**HOLD, "max_output_tokens": 2000}).encode()
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            await sock.connect((self.host, self.port))
            await sock.send((f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                             f"{KEY}\r\nContent-Type: application/json\r\nContent-Length: "
                             f"{len(body)}\r\n\r\n").encode() + body)
            # Nothing read for 8 s (--write-timeout is 3); then what the buffers held comes,
            # and the end of the stream: the server cut the connection. (Under load the
            # response may wait for a slot and fill the buffers late: up to a minute.)
            await trio.sleep(8)
            outcome = "not cut"
            with trio.move_on_after(60):
                while await sock.recv(65536):
                    pass
                outcome = "cut"
            self.note("stalled reader", outcome)
            if outcome != "cut":
                self.problems.append("a stalled reader was not cut by --write-timeout")
        finally:
            sock.close()

    async def client(self, deadline: float) -> None:
        actions = [self.stream_full] * 3 + [self.stream_disconnect] * 2 + [self.create] * 3 + \
            [self.background, self.reads, self.reads, self.early_answers]
        raw = [self.oversize, self.gone_before_body]
        async with httpx.AsyncClient(base_url=self.base_url, headers=AUTH,
                                     timeout=60) as http:
            while trio.current_time() < deadline:
                try:
                    if self.rng.random() < 0.1:
                        await self.rng.choice(raw)()
                    else:
                        await self.rng.choice(actions)(http)
                except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                    self.resets += 1
                    self.problems.append(f"unexpected reset: {exc!r}")
                except httpx.TimeoutException as exc:
                    self.timeouts += 1
                    self.problems.append(f"no answer within 60 s: {exc!r}")

    async def round(self, clients: int, seconds: float, stalled: int) -> None:
        deadline = trio.current_time() + seconds
        async with trio.open_nursery() as nursery:
            for _ in range(clients):
                nursery.start_soon(self.client, deadline)
            for _ in range(stalled):
                nursery.start_soon(self.stalled_reader)

    async def check_replays(self) -> tuple[int, int]:
        same = 0
        async with httpx.AsyncClient(base_url=self.base_url, headers=AUTH, timeout=60) as http:
            for rid, live in self.live_streams.items():
                r = await http.get(f"/v1/responses/{rid}", params={"stream": "true"})
                if r.status_code == 404:   # deleted or evicted: nothing to compare
                    continue
                replay = sse_events(r.text)
                if replay == live:
                    same += 1
                else:
                    self.problems.append(f"replay of {rid} differs from its live stream")
        return same, len(self.live_streams)


def idle_figures(http: httpx.Client, pid: int, port: int) -> dict[str, int]:
    """Tasks, RSS and CLOSE-WAIT sockets once the server has nothing running."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        health = http.get("/health").json()
        if health["slots"]["busy"] == 0 and health["responses"]["live"] == 0:
            break
        time.sleep(0.5)
    time.sleep(6)   # past the keep-alive timeout of any connection a client left open
    return {"tasks": http.get("/health").json()["tasks"], "rss_kib": rss_kib(pid),
            "close_wait": close_wait(port)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--stalled", type=int, default=2, help="stalled readers per round")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    proc, url = start()
    port = urlparse(url).port or 0
    soak = Soak(url, args.seed)
    figures = []
    try:
        with httpx.Client(base_url=url, headers=AUTH, timeout=60) as http:
            figures.append(("before", idle_figures(http, proc.pid, port)))
            for n in range(args.rounds):
                started = time.monotonic()
                trio.run(soak.round, args.clients, args.seconds, args.stalled)
                print(f"round {n + 1}: {sum(soak.statuses.values())} requests so far, "
                      f"{time.monotonic() - started:.0f} s", flush=True)
                figures.append((f"after round {n + 1}", idle_figures(http, proc.pid, port)))
            same, streams = trio.run(soak.check_replays)
    finally:
        stopping = time.monotonic()
        proc.terminate()
        try:
            code: int | str = proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "killed after 120 s"
        stopped = time.monotonic() - stopping
    print(f"\nclients {args.clients}, rounds {args.rounds} x {args.seconds:g} s, "
          f"{args.stalled} stalled readers a round\n")
    print("| action | status | count |\n|---|---|---|")
    for key, count in sorted(soak.statuses.items()):
        action, _, status = key.rpartition(" ")
        print(f"| {action} | {status} | {count} |")
    total = sum(soak.statuses.values())
    fivexx = sum(c for k, c in soak.statuses.items() if re.search(r" 5\d\d$", k))
    print(f"\nrequests {total}, 5xx {fivexx}, unexpected resets {soak.resets}, "
          f"requests without an answer within 60 s {soak.timeouts}")
    print("\n| when | tasks | RSS MiB | CLOSE-WAIT |\n|---|---|---|---|")
    for when, f in figures:
        print(f"| {when} | {f['tasks']} | {f['rss_kib'] / 1024:.0f} | {f['close_wait']} |")
    print(f"\nreplays identical to the live stream: {same} of {streams} stored streams "
          "(the rest deleted or evicted)")
    print(f"SIGTERM at the end: exit {code} after {stopped:.1f} s (--shutdown-timeout 5)")
    if code != 0 or stopped > 5 + 3 + 5:
        soak.problems.append("the shutdown took longer than --shutdown-timeout + 3 s (+5)")
    errors = [line for line in SERVER_LOG if "Traceback" in line or " ERROR " in line]
    print(f"server log: {len(SERVER_LOG)} lines, {len(errors)} errors or tracebacks")
    if errors:
        soak.problems.append(f"the server logged errors: {errors[:3]}")
    base = figures[0][1]["tasks"]
    if any(f["tasks"] > base for _, f in figures[1:]):
        soak.problems.append("tasks above the baseline after a round")
    if any(f["close_wait"] for _, f in figures):
        soak.problems.append("sockets left in CLOSE-WAIT")
    if soak.problems:
        print("\nPROBLEMS:\n" + "\n".join(sorted(set(soak.problems))[:50]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
