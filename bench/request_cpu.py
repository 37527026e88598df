#!/usr/bin/env python
"""Server CPU per request: triode from this tree and from other source trees, interleaved.

    git worktree add /tmp/ref OLD
    .venv/bin/python bench/request_cpu.py "" /tmp/ref      # "" is this tree

Each tree's server (bundled model, --parallel 8) gets 20 warm-up requests, then 150 streamed
requests with max_output_tokens 2, one at a time; the figure is the server process's CPU
(utime + stime from /proc, all its threads: MLX's too) per request, and the wall time. Three
rounds, the trees interleaved in each; the median round is reported. CPU time is less
sensitive to other load on the machine than wall time, so a change to the per-request path
shows here before it shows in tokens/s.
"""
import os
import re
import subprocess
import sys
import time

import httpx

TREES = sys.argv[1:] or [""]
N = 150
def start(tree):
    env = dict(os.environ)
    if tree: env["PYTHONPATH"] = tree + "/src"
    p = subprocess.Popen([sys.executable, "-m", "triode", "serve", "--port", "0", "--log-level", "warning", "--parallel", "8"],
                         stderr=subprocess.PIPE, text=True, env=env)
    for line in p.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m: return p, m.group(1)
def cpu(pid):
    with open(f"/proc/{pid}/stat") as stat:
        f = stat.read().split(")")[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
res = {t: [] for t in TREES}
for rnd in range(3):
    for t in TREES:
        p, url = start(t)
        c = httpx.Client(base_url=url, timeout=60)
        for i in range(20):
            c.post("/v1/responses", json={"model": "triode-tiny", "input": f"Reply with: warm{i}", "max_output_tokens": 2})
        c0 = cpu(p.pid); w0 = time.time()
        for i in range(N):
            r = c.post("/v1/responses", json={"model": "triode-tiny", "input": f"Reply with: word{i} other", "max_output_tokens": 2, "stream": True})
            assert r.status_code == 200
        dc = cpu(p.pid) - c0; dw = time.time() - w0
        res[t].append(dc / N * 1000)
        print(t or "HEAD", f"round {rnd}: {dc/N*1000:.2f} ms CPU/request, {dw/N*1000:.1f} ms wall", flush=True)
        p.terminate(); p.wait()
for t, v in res.items(): print(t or "HEAD", "median", sorted(v)[1])
