"""Codex CLI (@openai/codex, pinned in package-lock.json) against triode's bundled model.

Each test runs the real `codex exec` with HOME and CODEX_HOME in a temp dir holding
codex/config.toml (its base URL pointed at the test server), stdin from /dev/null, a timeout
and a minimal environment. Codex's stock prompt (codex/stock.toml, 21,692 tokens) does not fit
the bundled model's 4,096-token window; a server started with `--attention-window 512
--context-length 32768` answers it. codex/config.toml is the lean configuration most tests use
(1,372 tokens, see docs/clients.md), whose turns cost a second instead of fifteen. What happened is read from Codex's own records: its
`--json` events, its session rollout in CODEX_HOME/sessions and its log (RUST_LOG)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..conftest import run_server
from .conftest import HERE, NodeClients

CODEX_TIMEOUT = 120.0
CONFIG = HERE / "codex" / "config.toml"
STOCK_CONFIG = HERE / "codex" / "stock.toml"
TEMPLATE_URL = "http://127.0.0.1:8080"
# Codex's log, filtered to what says which transport carried the turn.
RUST_LOG = "error,codex_api::endpoint::responses_websocket=debug,codex_otel=info"
# The bundled model copies and calls tools reliably up to about this many prompt tokens;
# past ~1,600 its tool calls degrade (docs/clients.md has the measurements).
PROMPT_BUDGET = 1450
MARKER_SCRIPT = """#!/bin/sh
echo "written by codex" > triode-marker.txt
echo marker-written
"""


@dataclass
class CodexRun:
    returncode: int
    events: list[dict]
    stderr: str
    seconds: float

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("type") == kind]

    def items(self, kind: str) -> list[dict]:
        return [e["item"] for e in self.of_type("item.completed") if e["item"]["type"] == kind]

    def answer(self) -> str:
        messages = self.items("agent_message")
        assert messages, self.describe()
        return messages[-1]["text"]

    def usage(self) -> dict:
        completed = self.of_type("turn.completed")
        assert completed, self.describe()
        return completed[-1]["usage"]

    def api_requests(self, endpoint: str) -> list[str]:
        """Codex's log lines for HTTP API requests to `endpoint` (WebSocket turns have
        none for /responses)."""
        return [line for line in self.stderr.splitlines()
                if "codex_otel.log_only:" in line and 'event.name="codex.api_request"' in line
                and f'endpoint="{endpoint}"' in line]

    def describe(self) -> str:
        events = "\n".join(json.dumps(e) for e in self.events)
        return f"codex exited {self.returncode}\nevents:\n{events}\nstderr:\n{self.stderr[-4000:]}"


def with_overrides(toml: str, overrides: dict[str, object]) -> str:
    """The config with `key = value` changed where the key is (first occurrence, any table),
    or added at the top level (before the first table) when it is not there."""
    for key, value in overrides.items():
        line = re.compile(rf"^{re.escape(key)} = .*$", re.M)
        if line.search(toml):
            toml = line.sub(f"{key} = {value}", toml, count=1)
        else:
            toml = f"{key} = {value}\n" + toml
    return toml


class Codex:
    """One Codex home (HOME = CODEX_HOME, holding config.toml) and work dir for one test."""

    def __init__(self, clients: NodeClients, base_url: str, tmp: Path, *,
                 config: Path = CONFIG, **overrides: object):
        self.clients = clients
        self.home = tmp / "home"
        self.work = tmp / "work"
        self.bin = tmp / "bin"
        for d in (self.home, self.work, self.bin):
            d.mkdir()
        (self.home / "config.toml").write_text(
            with_overrides(config.read_text().replace(TEMPLATE_URL, base_url), overrides))
        marker = self.bin / "mkmarker"
        marker.write_text(MARKER_SCRIPT)
        marker.chmod(0o755)

    def exec(self, *args: str) -> CodexRun:
        env = {"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
               "HOME": str(self.home), "CODEX_HOME": str(self.home),
               "TRIODE_API_KEY": "sk-triode-test", "RUST_LOG": RUST_LOG, "LANG": "C.UTF-8"}
        argv = [*self.clients.codex, "exec", "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox", "--json", *args]
        started = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=self.work, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=CODEX_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"codex {' '.join(args)} did not end within "
                                 f"{CODEX_TIMEOUT:.0f} s:\n{exc.stdout}\n{exc.stderr}") from None
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return CodexRun(done.returncode, events, done.stderr, time.monotonic() - started)

    def rollout(self) -> list[dict]:
        """The session's rollout: Codex's own record of every item of the thread."""
        files = sorted(self.home.glob("sessions/*/*/*/rollout-*.jsonl"))
        assert len(files) == 1, files
        return [json.loads(line) for line in files[0].read_text().splitlines() if line]


def response_items(rollout: list[dict]) -> list[dict]:
    return [line["payload"] for line in rollout if line.get("type") == "response_item"]


def completed(run: CodexRun) -> CodexRun:
    assert run.returncode == 0 and run.of_type("turn.completed"), run.describe()
    assert not run.of_type("turn.failed"), run.describe()
    return run


# The window Codex's turns run in. The bundled model's answers degrade past ~1,450 prompt
# tokens anyway; a small window bounds what a runaway answer costs: Codex sends no
# max_output_tokens, so an answer that never ends runs until the window is full (at 4,096 that
# took 34 s on this 2-core machine, at 2,048 about 7 s).
CONTEXT_LENGTH = 2048


@pytest.fixture(scope="module")
def codex_triode():
    with run_server("--context-length", str(CONTEXT_LENGTH)) as server:
        yield server


@pytest.fixture
def codex(node_clients, codex_triode, tmp_path):
    def make(**overrides: object) -> Codex:
        return Codex(node_clients, codex_triode.base_url, tmp_path, **overrides)
    return make


def test_stock_configuration_runs_out_of_room_at_once(node_clients, triode, tmp_path):
    """Codex's stock prompt (21,692 tokens) is a fast, fatal context error, no retries."""
    # The default 4,096-token window: triode's context_length_exceeded, Codex's "ran out of room".
    stock = Codex(node_clients, triode.base_url, tmp_path, config=STOCK_CONFIG)
    run = stock.exec("Reply with: silver 411 lake")
    assert run.returncode == 1, run.describe()
    errors = [e["message"] for e in run.of_type("error")]
    assert any("ran out of room in the model's context window" in m for m in errors), \
        run.describe()
    assert run.of_type("turn.failed") and not run.items("agent_message"), run.describe()
    assert len(run.api_requests("/responses")) == 1, run.describe()
    assert run.seconds < 30, run.describe()


# Codex's stock prompt on the bundled model: a server that attends in a sliding window of
# STOCK_WINDOW tokens (--attention-window) admits it whole. The bundled model answers it right
# at windows of 128-512 tokens and degrades at 768 and more (docs/clients.md has the table).
STOCK_WINDOW = 512
STOCK_CONTEXT_LENGTH = 32768


@pytest.fixture(scope="module")
def stock_triode():
    with run_server("--attention-window", str(STOCK_WINDOW),
                    "--context-length", str(STOCK_CONTEXT_LENGTH)) as server:
        yield server


@pytest.mark.parametrize("websockets", ["false", "true"], ids=["http", "websocket"])
def test_stock_configuration_completes_a_turn(node_clients, stock_triode, tmp_path, websockets):
    """Codex's stock prompt (over 20,000 tokens) answered exactly, over HTTP and WebSocket."""
    stock = Codex(node_clients, stock_triode.base_url, tmp_path, config=STOCK_CONFIG,
                  supports_websockets=websockets)
    run = completed(stock.exec("Reply with: silver 411 lake"))
    assert run.answer() == "silver 411 lake"
    assert run.usage()["input_tokens"] > 20000, run.usage()
    if websockets == "true":
        assert "successfully connected to Responses WebSocket status=101" in run.stderr, \
            run.describe()
        assert run.api_requests("/responses") == [], run.describe()
    else:
        assert len(run.api_requests("/responses")) == 1, run.describe()
        assert "codex.websocket_connect" not in run.stderr


def test_stock_configuration_resume_reuses_the_prompt_cache(node_clients, stock_triode,
                                                             tmp_path):
    """codex exec resume --last on the stock prompt: the first answer repeated, and the
    resumed turn's 21,700-token prefix comes from the prompt cache (rotating caches are
    reused when the next prompt extends them)."""
    stock = Codex(node_clients, stock_triode.base_url, tmp_path, config=STOCK_CONFIG)
    first = completed(stock.exec("Reply with: amber 77 kite"))
    second = completed(stock.exec("resume", "--last", "Repeat your first answer."))
    assert (first.answer(), second.answer()) == ("amber 77 kite", "amber 77 kite")
    assert second.usage()["cached_input_tokens"] >= first.usage()["input_tokens"], \
        (first.usage(), second.usage())


def test_exec_turn_over_http(codex):
    """codex exec completes a turn over HTTP + SSE with a prompt under PROMPT_BUDGET."""
    home = codex()
    run = completed(home.exec("Reply with: silver 411 lake"))
    assert run.answer() == "silver 411 lake"
    assert run.usage()["input_tokens"] <= PROMPT_BUDGET, run.usage()
    assert run.api_requests("/responses"), run.describe()
    assert run.api_requests("/models"), run.describe()   # model_catalog_url was read
    assert "codex.websocket_connect" not in run.stderr
    assert run.items("error") == [], run.describe()   # e.g. "Model metadata ... not found"


def test_exec_turn_over_websocket(codex):
    """codex exec with supports_websockets = true runs its turn over a WebSocket."""
    # The server's 101 in Codex's log, its websocket requests, and no HTTP request to /responses.
    home = codex(**{"supports_websockets": "true"})
    run = completed(home.exec("Reply with: amber 77 kite"))
    assert run.answer() == "amber 77 kite"
    assert "successfully connected to Responses WebSocket status=101" in run.stderr, \
        run.describe()
    assert 'event.name="codex.websocket_request"' in run.stderr
    assert run.api_requests("/responses") == [], run.describe()
    assert "Falling back from WebSockets" not in run.stderr + json.dumps(run.events)


@pytest.mark.parametrize("websockets", ["false", "true"], ids=["http", "websocket"])
def test_tool_round_trip(codex, websockets):
    """Codex runs the exec_command the model calls and sends its output back."""
    # `Call exec_command with cmd=mkmarker`: the marker file appears, Codex reports the output,
    # and a second request carrying it is answered by triode.
    home = codex(**{"supports_websockets": websockets})
    run = home.exec("Call exec_command with cmd=mkmarker")
    commands = run.items("command_execution")
    assert len(commands) == 1, run.describe()
    assert commands[0]["exit_code"] == 0 and commands[0]["status"] == "completed", commands
    assert commands[0]["aggregated_output"] == "marker-written\n", commands
    assert (home.work / "triode-marker.txt").read_text() == "written by codex\n"
    items = response_items(home.rollout())
    kinds = [(i["type"], i.get("role")) for i in items]
    assert kinds[:3] == [("message", "user"), ("function_call", None),
                         ("function_call_output", None)], kinds
    call, output = items[1], items[2]
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": "mkmarker"}
    assert output["call_id"] == call["call_id"] and "marker-written" in output["output"]
    # Two model requests, no retry: the call, then the one that read the output.
    assert "sampling_request_count=2 sampling_retry_count=0" in run.stderr, run.describe()
    # What the bundled model answers to Codex's wrapped output is noise (see the xfail
    # below): a short message, nothing, or text that runs until the window is full, which
    # triode ends as `incomplete` (max_output_tokens) and Codex reports as a failed turn.
    if run.returncode == 0:
        completed(run)
        assert kinds[3:] in ([], [("message", "assistant")]), kinds
    else:
        assert [e["error"]["message"] for e in run.of_type("turn.failed")] == \
            ["Incomplete response returned, reason: max_output_tokens"], run.describe()


@pytest.mark.xfail(strict=True, reason=(
    "model limit: the bundled model answers a tool output that is the value itself; Codex "
    "wraps it ('Chunk ID: ..\\nWall time: ..\\nProcess exited with code 0\\nOriginal token "
    "count: N\\nOutput:\\nmarker-written'), and the model answers that with noise at any "
    "prompt size (measured from 211 to 1,502 tokens; docs/clients.md)"))
def test_answer_restates_the_tool_output(codex):
    """After the tool round trip the model's answer restates the command's output."""
    run = completed(codex().exec("Call exec_command with cmd=mkmarker"))
    assert "marker-written" in run.answer()


def test_exec_resume_last_continues(codex):
    """codex exec resume --last continues the thread: it repeats the first answer."""
    home = codex()
    first = completed(home.exec("Reply with: amber 77 kite"))
    assert first.answer() == "amber 77 kite"
    second = completed(home.exec("resume", "--last", "Repeat your first answer."))
    assert second.answer() == "amber 77 kite"
    assert (second.of_type("thread.started")[0]["thread_id"]
            == first.of_type("thread.started")[0]["thread_id"])
    users = [i["content"][0]["text"] for i in response_items(home.rollout())
             if i["type"] == "message" and i["role"] == "user"]
    assert users == ["Reply with: amber 77 kite", "Repeat your first answer."]


def test_auto_compaction(codex):
    """Codex compacts locally through triode past model_auto_compact_token_limit."""
    # The limit (1000) is below the first turn's total (~1,390 tokens from triode's usage), so the
    # resumed turn starts with a compaction request and then answers in the new window.
    home = codex(model_auto_compact_token_limit="1000")
    first = completed(home.exec("Reply with: amber 77 kite"))
    assert first.usage()["input_tokens"] + first.usage()["output_tokens"] > 1000
    second = completed(home.exec("resume", "--last", "Reply with: blue 5 fern"))
    assert second.answer() == "blue 5 fern"
    rollout = home.rollout()
    types = [line["type"] for line in rollout]
    assert types.count("compacted") == 1, types
    compaction_items = [line for line in rollout if line["type"] == "event_msg"
                        and line["payload"].get("type") == "item_completed"
                        and line["payload"]["item"]["type"] == "ContextCompaction"]
    assert len(compaction_items) == 1
    # The compaction came before the second turn's prompt, and that turn was answered.
    compacted_at = types.index("compacted")
    later = response_items(rollout[compacted_at:])
    assert [i["content"][0]["text"] for i in later if i["type"] == "message"] == \
        ["Reply with: blue 5 fern", "blue 5 fern"]


def test_docs_show_the_config_the_tests_use():
    """docs/clients.md shows codex/config.toml exactly as the tests use it."""
    doc = (HERE.parents[1] / "docs" / "clients.md").read_text()
    assert f"```toml\n{CONFIG.read_text()}```" in doc
