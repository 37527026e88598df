"""Startup errors: each is one line on stderr naming the flag or path, and a non-zero exit,
never a traceback; the flags at parse time, the port before the model loads, the model
path before it loads. Plain hypercorn fails its start too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import run_server

TIMEOUT = 120


def serve(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "triode", "serve", *flags],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, **(env or {})})


def fails_with(done: subprocess.CompletedProcess[str], line: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    last = [text for text in done.stderr.splitlines() if text.strip()][-1]
    assert last == line, done.stderr


@pytest.mark.parametrize("flags,env,line", [
    (["--port", "70000"], {}, "triode: --port must be between 0 and 65535 (got 70000)"),
    (["--port", "-1"], {}, "triode: --port must be between 0 and 65535 (got -1)"),
    (["--parallel", "0"], {}, "triode: --parallel must be at least 1 (got 0)"),
    (["--shutdown-timeout", "-1"], {}, "triode: --shutdown-timeout must be 0 or more (got -1.0)"),
    (["--responses-store-ttl-secs", "-5"], {},
     "triode: --responses-store-ttl-secs must be 0 or more (got -5)"),
    ([], {"TRIODE_SHUTDOWN_TIMEOUT": "soon"},
     "triode: environment variable TRIODE_SHUTDOWN_TIMEOUT: could not convert string to "
     "float: 'soon'"),
])
def test_flags_out_of_range_fail_at_parse_time(flags, env, line):
    """A value out of its range is refused before anything starts, naming the flag (or the
    variable) and what is allowed."""
    done = serve(*flags, env=env)
    fails_with(done, line)
    assert done.returncode == 2


def test_a_missing_model_directory_is_one_line():
    """--model naming a path that does not exist fails before anything loads."""
    fails_with(serve("--model", "/nonexistent"), "triode: --model: /nonexistent: no such directory")


def test_a_model_directory_without_config_json_is_one_line(tmp_path: Path):
    """A directory that is neither an mlx-lm model (no config.json) nor holds a GGUF file
    fails before it loads; so does a file that is not a GGUF."""
    fails_with(serve("--model", str(tmp_path)),
               f"triode: --model: {tmp_path}: no config.json in it (not an mlx-lm model "
               "directory) and no GGUF file")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    fails_with(serve("--model", str(weights)),
               f"triode: --model: {weights}: not a directory or a GGUF file")


def test_a_model_that_does_not_load_is_one_line(tmp_path: Path):
    """A directory with a config.json but no weights fails its load in one line saying
    why."""
    (tmp_path / "config.json").write_text("{}")
    fails_with(serve("--model", str(tmp_path)),
               f"triode: --model: {tmp_path}: cannot load it: FileNotFoundError: No "
               f"safetensors found in {tmp_path}")


def test_a_repo_id_neither_cached_nor_reachable_is_one_line(tmp_path: Path):
    """A Hugging Face repo id that is not in the (empty) cache, with the Hub off, says so."""
    done = serve("--model", "someorg/some-model",
                 env={"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    fails_with(done, "triode: --model: someorg/some-model: no such directory, and not in the "
               "Hugging Face cache; HF_HUB_OFFLINE is set, so the Hub was not asked")


def test_a_port_in_use_fails_before_the_model_loads():
    """A port in use is one line naming --host/--port, at once: the model is not loaded."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve("--port", str(port), "--log-level", "info")
    fails_with(done, f"triode: --host/--port: 127.0.0.1:{port}: address already in use")
    assert "loading model" not in done.stderr


def test_an_address_not_of_this_machine_is_one_line():
    """--host naming an address this machine does not have fails naming it."""
    fails_with(serve("--host", "192.0.2.1"),  # TEST-NET-1: never a local address
               "triode: --host/--port: 192.0.2.1:8080: not an address of this machine")


def test_loading_is_logged_before_the_load():
    """`loading model X` is logged before the load starts, `model X loaded` after it."""
    with run_server("--log-level", "info") as srv:
        log = "".join(srv.log)
    assert 0 <= log.index("loading model ") < log.index(" loaded (context ")


def hypercorn(*flags: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    return subprocess.run(
        [sys.executable, "-m", "hypercorn", "--worker-class", "trio", "--bind",
         f"127.0.0.1:{port}", *flags, "triode.http.app:create_app()"],
        capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, **env})


def test_plain_hypercorn_with_a_bad_model_exits_non_zero():
    """Under plain hypercorn (in-process worker) a failed start is one line naming the model
    path and exit status 1, before hypercorn says "Running on"."""
    started = time.monotonic()
    done = hypercorn("--workers", "0", env={"TRIODE_MODEL": "/nonexistent"})
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1] == "triode: --model: /nonexistent: no such directory", done.stderr
    assert "Traceback" not in done.stderr and "Running on" not in done.stderr
    assert time.monotonic() - started < 60


@pytest.mark.xfail(strict=True, reason="hypercorn 0.18's master returns 0 whatever its worker "
                   "exited with (pgjones/hypercorn#269, fix proposed in #372)")
def test_plain_hypercorn_with_worker_processes_exits_non_zero():
    """With hypercorn's worker processes (the default, --workers 1) the worker fails the same
    way, but hypercorn's master process drops its exit status."""
    done = hypercorn(env={"TRIODE_MODEL": "/nonexistent"})
    assert "--model: /nonexistent: no such directory" in done.stderr
    assert done.returncode != 0
