"""Claude Code (@anthropic-ai/claude-code, pinned in package-lock.json) against triode's
bundled model over `/v1/messages`, run non-interactively (`claude -p`).

Offline, it needs: `ANTHROPIC_BASE_URL` (the server) and `ANTHROPIC_API_KEY`; `--bare` (no
hooks, plugins, OAuth or keychain: the key alone); `DISABLE_TELEMETRY`,
`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` and `DISABLE_AUTOUPDATER` (nothing else is
contacted); a HOME of its own. Its stock request (its system prompt and a dozen tools) is
12,403 tokens on SmolLM2 (28,230 on the bundled model's tokenizer): over SmolLM2's 8,192
window, and long enough that the bundled model's answers stop making sense. So the tests use
a lean configuration, as Codex's do: `--system-prompt` and `--tools ""`, about 500 tokens
(docs/clients.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

MODEL = "triode-tiny"
TIMEOUT = 120.0


def claude(node_clients, base_url: str, home: Path, prompt: str, *extra: str) -> dict:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home),
           "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "sk-triode-test",
           "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_AUTOUPDATER": "1"}
    done = subprocess.run(
        [*node_clients.claude, "--bare", "--system-prompt", "You are a helpful assistant.",
         "--model", MODEL, "--max-turns", "2", "--output-format", "json", *extra,
         "-p", prompt],
        cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=TIMEOUT)
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout)


def test_a_prompt_is_answered_through_the_messages_api(node_clients, triode, tmp_path):
    """`claude -p "Reply with: ok"` streams its answer from /v1/messages: the result is the
    bundled model's answer, with no API error, in one turn; the server logged the request."""
    result = claude(node_clients, triode.base_url, tmp_path, "Reply with: ok", "--tools", "")
    assert (result["result"], result["is_error"], result["num_turns"]) == ("ok", False, 1)
    assert result["api_error_status"] is None and result["terminal_reason"] == "completed"
    assert result["usage"]["output_tokens"] > 0
