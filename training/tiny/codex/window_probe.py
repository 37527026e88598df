"""How the bundled model answers Codex's stock prompt under `--attention-window N`.

Captures the request Codex CLI (the pinned one in tests/clients; run `npm ci` there first)
sends with its stock configuration (tests/clients/codex/stock.toml), by pointing it at a
throwaway HTTP server that records the body. Renders it with the bundled chat template the way
triode does (input messages in order; function tools and the tools of namespaces; hosted tools
dropped), prefills the shared prefix once per window, then decodes greedily, for each prompt,
what the model answers with every layer attending to the last N positions (mlx-lm's
`RotatingKVCache`, the cache `--attention-window` gives each sequence). N = 0 is full attention.

    PYTHONPATH=src python -m training.tiny.codex.window_probe --windows 0 256 512 1024 2048
"""

from __future__ import annotations

import argparse
import copy
import http.server
import json
import os
import random
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
CLIENTS = ROOT / "tests" / "clients"
WORDS = ("amber silver blue cedar plum kite lake fern rice falcon stone river maple orange "
         "green").split()


def capture_stock_request() -> dict[str, Any]:
    """The body of the first POST /v1/responses of `codex exec` with the stock config."""
    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()

        def do_POST(self) -> None:
            bodies.append(self.rfile.read(int(self.headers.get("content-length", 0))))
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "captured", "type": '
                             b'"invalid_request_error", "param": null, "code": null}}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        config = (CLIENTS / "codex" / "stock.toml").read_text().replace(
            "http://127.0.0.1:8080", f"http://127.0.0.1:{server.server_port}")
        (home / "config.toml").write_text(config)
        env = {"PATH": os.environ["PATH"], "HOME": tmp, "CODEX_HOME": tmp,
               "TRIODE_API_KEY": "sk-probe", "LANG": "C.UTF-8"}
        subprocess.run(["node", str(CLIENTS / "node_modules/@openai/codex/bin/codex.js"), "exec",
                        "--skip-git-repo-check", "--json", "Reply with: hello"], cwd=tmp,
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    server.shutdown()
    if not bodies:
        raise SystemExit("codex sent no request (is tests/clients/node_modules installed?)")
    body: dict[str, Any] = json.loads(bodies[0])
    return body


def chat(body: dict[str, Any]) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    def text(content: Any) -> str:
        return content if isinstance(content, str) else "".join(
            p.get("text", "") for p in content)

    messages = [{"role": "system", "content": body["instructions"]}] \
        if body.get("instructions") else []
    messages += [{"role": i["role"], "content": text(i["content"])} for i in body["input"]
                 if i.get("type", "message") == "message"]
    tools = [t for t in body.get("tools", []) if t.get("type") == "function"]
    for t in body.get("tools", []):
        if t.get("type") == "namespace":
            tools += [x for x in t.get("tools", []) if x.get("type") == "function"]
    return messages, tools


def greedy(model: Any, tokenizer: Any, tokens: list[int], cache: list[Any]) -> str:
    """What the model answers after `tokens` (fed on top of `cache`), greedily, at most 48
    tokens."""
    import mlx.core as mx

    logits = model(mx.array(tokens)[None], cache=cache)
    out: list[int] = []
    for _ in range(48):
        token = int(mx.argmax(logits[0, -1]).item())
        if token in tokenizer.eos_token_ids:
            break
        out.append(token)
        logits = model(mx.array([[token]]), cache=cache)
    return str(tokenizer.decode(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[0, 256, 512, 1024, 2048])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, RotatingKVCache

    from triode.model.loading import BUNDLED_PATH, load

    model, tokenizer = load(str(BUNDLED_PATH))
    messages, tools = chat(capture_stock_request())
    rng = random.Random(args.seed)
    cases = [(f"Reply with: {w}", w) for w in (
        f"{rng.choice(WORDS)} {rng.randint(1, 500)} {rng.choice(WORDS)}"
        for _ in range(args.prompts))]
    cases += [(f"Call exec_command with cmd={c}", c) for c in ("mkmarker", "pwd", "ls")]

    def render(prompt: str) -> list[int]:
        text = tokenizer.apply_chat_template(
            messages[:-1] + [{"role": "user", "content": prompt}], tools=tools,
            add_generation_prompt=True, tokenize=False)
        return list(tokenizer.encode(text, add_special_tokens=False))

    rendered = [render(p) for p, _ in cases]
    shared = 0
    while all(len(r) > shared and r[shared] == rendered[0][shared] for r in rendered):
        shared += 1
    print(f"stock prompt: {len(rendered[0])} tokens ({shared} shared by every case), "
          f"{len(tools)} function tools")
    print("| window | replies right | tool calls right (name and cmd) | sample reply | sample call |")
    print("|---|---|---|---|---|")
    for window in args.windows:
        cache = [RotatingKVCache(max_size=window) if window else KVCache()
                 for _ in model.layers]
        prefix = mx.array(rendered[0][:shared])
        for i in range(0, shared, 2048):
            model(prefix[None, i:i + 2048], cache=cache)
            mx.eval([c.state for c in cache])
        replies = calls = 0
        samples: dict[str, str] = {}
        for (prompt, want), tokens in zip(cases, rendered):
            c = copy.deepcopy(cache)
            answer = greedy(model, tokenizer, tokens[shared:], c)
            if prompt.startswith("Reply"):
                replies += answer.strip() == want
                samples.setdefault("reply", f"{want} → {answer.strip()!r}")
            else:
                calls += (f'"name": "exec_command", "arguments": {{"cmd": "{want}"}}' in answer)
                samples.setdefault("call", answer.replace("\n", " ")[:90])
        print(f"| {window or 'full'} | {replies}/{args.prompts} | {calls}/3 | "
              f"{samples['reply']} | `{samples['call']}` |", flush=True)
    # The same prompts alone (no instructions, no tools), full attention: the model's own rate.
    alone = 0
    for prompt, want in cases[:args.prompts]:
        tokens = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                               add_generation_prompt=True)
        answer = greedy(model, tokenizer, tokens, [KVCache() for _ in model.layers])
        alone += answer.strip() == want
    print(f"| the replies alone (no Codex prompt) | {alone}/{args.prompts} | | | |")


if __name__ == "__main__":
    main()
