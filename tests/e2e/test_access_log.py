"""The access log: one INFO line per request on the `triode.access` logger (one per WebSocket,
when it closes), on by default, off with `--access-log off` / TRIODE_ACCESS_LOG=off."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from typing import Iterator

import httpx
from websockets.sync.client import connect

from triode.settings import resolve

from ..conftest import run_server, wait_until
from .test_spine import MODEL

LINE = re.compile(r"INFO triode\.access: (?P<client>\S+) (?P<method>[A-Z]+) (?P<path>\S+) "
                  r"(?P<status>\d{3}) (?P<seconds>\d+\.\d{3})s(?P<rest>.*)$")


def access_lines(log: list[str]) -> list[re.Match[str]]:
    return [m for line in list(log) if (m := LINE.search(line.rstrip("\n")))]


def line_for(log: list[str], method: str, path: str) -> re.Match[str]:
    """The access line of a request, waiting for it: it is written once the response's last
    byte has been sent, which may be after the client has read it."""
    return wait_until(lambda: next((m for m in access_lines(log)
                                    if (m["method"], m["path"]) == (method, path)), None))


def fields(match: re.Match[str]) -> dict[str, str]:
    return dict(part.split("=", 1) for part in match["rest"].split() if "=" in part)


def test_one_line_per_request_by_default():
    """With the default log level (info) every request gets one line: client, method, path
    (with its query), status, duration; a create's line names its response and its tokens,
    as the response reports them, streamed or not; a WebSocket's line is written when it
    closes, with its number of responses and their tokens summed."""
    assert resolve({}, {}).log_level == "info" and resolve({}, {}).access_log == "on"
    with run_server("--log-level", "info") as srv:
        client = srv.client()
        created = client.responses.create(model=MODEL, input="Reply with: lantern")
        line = line_for(srv.log, "POST", "/v1/responses")
        assert line["client"] == "127.0.0.1" and line["status"] == "200"
        told = fields(line)
        drafts = told.pop("accepted_drafts")   # speculation is on by default
        assert told == {
            "response": created.id, "input_tokens": str(created.usage.input_tokens),
            "cached_tokens": str(created.usage.input_tokens_details.cached_tokens),
            "output_tokens": str(created.usage.output_tokens)}
        assert 0 <= int(drafts) < created.usage.output_tokens

        with client.responses.stream(model=MODEL, input="Reply with: harbor") as stream:
            streamed = stream.get_final_response()
        wait_until(lambda: len([m for m in access_lines(srv.log)
                                if m["method"] == "POST"]) == 2)
        line = [m for m in access_lines(srv.log) if m["method"] == "POST"][-1]
        assert fields(line)["response"] == streamed.id
        assert fields(line)["output_tokens"] == str(streamed.usage.output_tokens)

        srv.http.get("/v1/responses/resp_missing", params={"stream": "false"})
        line = line_for(srv.log, "GET", "/v1/responses/resp_missing?stream=false")
        assert line["status"] == "404" and fields(line) == {}

        url = srv.base_url.replace("http://", "ws://", 1) + "/v1/responses"
        with connect(url, additional_headers={"Authorization": "Bearer x"}) as ws:
            outputs = []
            for word in ("one", "two"):
                ws.send(json.dumps({"type": "response.create", "model": MODEL,
                                    "input": f"Reply with: {word}"}))
                while (frame := json.loads(ws.recv(timeout=60)))["type"] != "response.completed":
                    pass
                outputs.append(frame["response"]["usage"]["output_tokens"])
        line = line_for(srv.log, "GET", "/v1/responses")
        assert line["status"] == "101" and " websocket " in line["rest"]
        assert fields(line)["responses"] == "2" and fields(line)["errors"] == "0"
        assert fields(line)["output_tokens"] == str(sum(outputs))
        assert len(access_lines(srv.log)) == 4   # one per request, nothing twice


def test_access_log_off_silences_the_line():
    """`--access-log off`: no access line, other INFO lines still, and /metrics still
    counts the requests."""
    with run_server("--log-level", "info", "--access-log", "off") as srv:
        srv.client().responses.create(model=MODEL, input="Reply with: quiet")
        metrics = srv.http.get("/metrics").text
        assert 'route="/v1/responses",status="200"} 1.0' in metrics
        assert any("INFO triode" in line for line in srv.log)
        assert access_lines(srv.log) == []


def test_plain_hypercorn_reads_the_setting_from_the_environment(tmp_path):
    """Under plain hypercorn the app's lifespan reads TRIODE_ACCESS_LOG with the other
    settings: the line shows by default (logging configured by hypercorn's --log-config)
    and `off` silences it there too."""
    config = tmp_path / "logging.json"
    config.write_text(json.dumps({
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
        "root": {"level": "INFO", "handlers": ["stderr"]}}))
    for setting, lines in (("on", 1), ("off", 0)):
        with plain_hypercorn(config, {"TRIODE_ACCESS_LOG": setting}) as (base, log):
            r = httpx.post(base + "/v1/responses", timeout=60,
                           json={"model": MODEL, "input": "Reply with: hush"})
            assert r.status_code == 200
            metrics = httpx.get(base + "/metrics").text
            assert 'route="/v1/responses",status="200"} 1.0' in metrics
            if lines:
                line_for(log, "POST", "/v1/responses")
            assert len([m for m in access_lines(log) if m["method"] == "POST"]) == lines


@contextlib.contextmanager
def plain_hypercorn(log_config, env: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """`hypercorn --worker-class trio 'triode.http.app:create_app()'` on a free port, up:
    its base URL and its stderr lines so far (filled as they come)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hypercorn", "--worker-class", "trio", "--bind",
         f"127.0.0.1:{port}", "--log-config", f"json:{log_config}",
         "triode.http.app:create_app()"],
        env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log: list[str] = []

    def pump() -> None:
        for line in proc.stderr:
            log.append(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(base + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout=120, interval=0.2)
        yield base, log
    finally:
        proc.terminate()
        proc.wait(10)
