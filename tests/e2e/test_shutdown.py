"""Graceful shutdown, end to end: a real server gets SIGTERM (or SIGINT) with responses in
flight. Within `--shutdown-timeout` they finish and their clients get the whole answer;
past it they end `failed` with the shutdown reason, streams with `response.failed`; jobs
left unfinished end the same way, and the log names what was cut.

The long generations are "hold" requests (test_spine.HOLD): constrained decoding cannot end
them early, so one runs exactly `max_output_tokens` steps (about 6 ms a step here)."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Iterator

import httpx

from ..conftest import Server, run_server, wait_until
from .test_spine import HOLD

SHUTTING_DOWN = "shutting down"


def hold(max_output_tokens: int, **extra: object) -> dict:
    return {**HOLD, "max_output_tokens": max_output_tokens, **extra}


def events(lines: Iterator[str]) -> Iterator[dict]:
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line.removeprefix("data: "))


def follow_to_first_delta(lines: Iterator[str]) -> list[dict]:
    """The events up to (and with) the first text delta: generation is under way."""
    seen = []
    for event in events(lines):
        seen.append(event)
        if event["type"] == "response.output_text.delta":
            return seen
    raise AssertionError(f"the stream ended before any delta: {seen}")


def exits_cleanly(srv: Server, within: float) -> None:
    assert srv.proc.wait(within) == 0
    assert not any("Traceback" in line for line in srv.log), "".join(srv.log)


def log_text(srv: Server) -> str:
    return "".join(srv.log)


def test_a_stream_in_flight_at_sigterm_gets_its_terminal_event():
    """Within the timeout, a stream running at SIGTERM runs to its own end: every event
    arrives, the last one terminal, and then the process exits 0."""
    with run_server("--shutdown-timeout", "60", "--log-level", "info") as srv:
        with httpx.Client(base_url=srv.base_url, timeout=60) as http:
            with http.stream("POST", "/v1/responses", json=hold(600)) as r:
                lines = r.iter_lines()
                seen = follow_to_first_delta(lines)
                srv.proc.send_signal(signal.SIGTERM)
                seen += list(events(lines))
        assert seen[-1]["type"] == "response.incomplete"
        final = seen[-1]["response"]
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}
        assert final["usage"]["output_tokens"] == 600
        assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
        exits_cleanly(srv, 30)
        assert "for 1 running response" in log_text(srv)


def create_in_thread(srv, body: dict) -> tuple[threading.Thread, list[httpx.Response]]:
    """A non-streaming create of `body` from another thread; its answer lands in the list."""
    answers: list[httpx.Response] = []

    def create() -> None:
        with httpx.Client(base_url=srv.base_url, timeout=60) as http:
            answers.append(http.post("/v1/responses",
                                     json={k: v for k, v in body.items() if k != "stream"}))

    thread = threading.Thread(target=create)
    thread.start()
    return thread, answers


def test_a_non_streaming_request_in_flight_at_sigterm_gets_its_whole_response():
    """Within the timeout, a non-streaming create running at SIGTERM gets its complete JSON
    response (200, the finished object), and then the process exits 0."""
    with run_server("--shutdown-timeout", "60") as srv:
        thread, answers = create_in_thread(srv, hold(800))
        wait_until(lambda: srv.health()["slots"]["busy"] == 1)
        srv.proc.send_signal(signal.SIGTERM)
        thread.join(60)
        (answer,) = answers
        assert answer.status_code == 200, answer.text
        obj = answer.json()
        assert obj["status"] == "incomplete" and obj["usage"]["output_tokens"] == 800
        assert obj["output"][0]["content"][0]["text"].startswith('{"a')
        exits_cleanly(srv, 30)


def test_past_the_timeout_running_responses_end_failed_with_the_shutdown_reason():
    """Responses still running when the shutdown timeout runs out end `failed` with a
    reason saying the server is shutting down: a stream gets `response.failed`, a
    non-streaming request the failed object; the log names both; the process exits 0."""
    with run_server("--shutdown-timeout", "1", "--parallel", "2") as srv:
        thread, answers = create_in_thread(srv, hold(4000))
        with httpx.Client(base_url=srv.base_url, timeout=60) as http:
            with http.stream("POST", "/v1/responses", json=hold(4000)) as r:
                lines = r.iter_lines()
                seen = follow_to_first_delta(lines)
                wait_until(lambda: srv.health()["slots"]["busy"] == 2)
                sent = time.monotonic()
                srv.proc.send_signal(signal.SIGTERM)
                seen += list(events(lines))
                elapsed = time.monotonic() - sent
        thread.join(60)
        assert seen[-1]["type"] == "response.failed"
        streamed = seen[-1]["response"]
        assert streamed["error"]["code"] == "server_error"
        assert SHUTTING_DOWN in streamed["error"]["message"]
        assert streamed["usage"]["output_tokens"] < 4000
        assert elapsed < 15, elapsed   # cut at 1 s, not after the 4,000 steps (~25 s)
        (answer,) = answers
        assert answer.status_code == 200, answer.text
        obj = answer.json()
        assert obj["status"] == "failed" and SHUTTING_DOWN in obj["error"]["message"]
        exits_cleanly(srv, 30)
        cut_line = next(line for line in srv.log if "shutdown timeout" in line)
        assert "WARNING" in cut_line and "2 unfinished responses" in cut_line
        assert streamed["id"] in cut_line and obj["id"] in cut_line


def test_background_jobs_left_unfinished_end_failed():
    """Background jobs still running or queued at the end of the timeout end `failed` with
    the shutdown reason: a client following one live gets `response.failed`, and the log
    names both jobs."""
    with run_server("--shutdown-timeout", "0", "--parallel", "1") as srv:
        job = {k: v for k, v in hold(4000).items() if k != "stream"} | {"background": True}
        running = srv.http.post("/v1/responses", json=job).json()
        queued = srv.http.post("/v1/responses", json=job).json()
        with httpx.Client(base_url=srv.base_url, timeout=60) as http:
            with http.stream("GET", f"/v1/responses/{running['id']}?stream=true") as r:
                lines = r.iter_lines()
                follow_to_first_delta(lines)
                assert srv.http.get(f"/v1/responses/{queued['id']}").json()["status"] == "queued"
                srv.proc.send_signal(signal.SIGTERM)
                rest = list(events(lines))
        assert rest[-1]["type"] == "response.failed"
        assert SHUTTING_DOWN in rest[-1]["response"]["error"]["message"]
        exits_cleanly(srv, 30)
        cut_line = next(line for line in srv.log if "shutdown timeout" in line)
        assert "(2 background)" in cut_line
        assert running["id"] in cut_line and queued["id"] in cut_line


def test_a_second_signal_cuts_at_once():
    """A second SIGTERM/SIGINT does not wait for the rest of the shutdown timeout: the
    running stream ends `failed` with the shutdown reason right away."""
    with run_server("--shutdown-timeout", "300") as srv:
        with httpx.Client(base_url=srv.base_url, timeout=60) as http:
            with http.stream("POST", "/v1/responses", json=hold(4000)) as r:
                lines = r.iter_lines()
                follow_to_first_delta(lines)
                srv.proc.send_signal(signal.SIGTERM)
                time.sleep(0.5)
                sent = time.monotonic()
                srv.proc.send_signal(signal.SIGINT)
                rest = list(events(lines))
                elapsed = time.monotonic() - sent
        assert rest[-1]["type"] == "response.failed"
        assert SHUTTING_DOWN in rest[-1]["response"]["error"]["message"]
        assert elapsed < 15, elapsed
        exits_cleanly(srv, 30)
