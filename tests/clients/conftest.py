"""Fixtures for the real-client tests: the pinned Node programs (installed with `npm ci` from
this folder's package-lock.json), and triode servers for them.

Nothing here talks to anything but 127.0.0.1 once the packages are installed: the clients are
pointed at the test servers, Codex runs with a config that turns off its update check,
metrics, plugin sync and analytics (codex/config.toml), and the Agents SDK's tracing is off.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from ..conftest import Server, run_server

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
# Written after a successful `npm ci`: the hash of the manifest and lockfile it installed.
STAMP = NODE_MODULES / ".triode-installed"
CODEX_JS = NODE_MODULES / "@openai" / "codex" / "bin" / "codex.js"
# Claude Code's CLI: a native binary its package installs for the platform.
CLAUDE = NODE_MODULES / ".bin" / "claude"
# The packages the scripts in ts/ import (package.json's dependencies besides Codex).
NODE_PACKAGES = ("openai", "ai", "@ai-sdk/openai", "zod")
NPM_CI_TIMEOUT = 900.0


@dataclass(frozen=True)
class NodeClients:
    node: str
    codex: list[str]            # argv prefix that runs the pinned Codex CLI
    claude: list[str]           # argv prefix that runs the pinned Claude Code CLI
    scripts: Path               # tests/clients/ts: the openai-node and AI SDK scripts


def _lock_digest() -> str:
    h = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        h.update((HERE / name).read_bytes())
    return h.hexdigest()


def _installed(digest: str) -> bool:
    return (STAMP.is_file() and STAMP.read_text().strip() == digest and CODEX_JS.is_file()
            and CLAUDE.exists()
            and all((NODE_MODULES / name / "package.json").is_file() for name in NODE_PACKAGES))


def _npm_ci(npm: str, digest: str) -> None:
    try:
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                              cwd=HERE, capture_output=True, text=True,
                              timeout=NPM_CI_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`npm ci` in {HERE} did not finish in {NPM_CI_TIMEOUT:.0f} s",
                    pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"`npm ci` in {HERE} failed ({done.returncode}):\n"
                    f"{done.stdout}\n{done.stderr}", pytrace=False)
    STAMP.write_text(digest + "\n")
    if not _installed(digest):
        pytest.fail(f"`npm ci` in {HERE} did not install {CODEX_JS}", pytrace=False)


@pytest.fixture(scope="session")
def node_clients() -> NodeClients:
    """node + the pinned npm packages; `npm ci` when node_modules is missing or stale.

    A machine without node or npm fails these tests (it does not skip them): CI must not turn
    green while the client tests did not run."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        missing = " and ".join(n for n, p in (("node", node), ("npm", npm)) if not p)
        pytest.fail(f"tests/clients needs Node.js (>= 20) and npm on PATH, but {missing} "
                    "cannot be found: install Node.js so that `npm ci` can install the pinned "
                    "clients of tests/clients/package-lock.json", pytrace=False)
    digest = _lock_digest()
    # The tests run in two worker processes (pytest-xdist): one installs, the other waits on
    # the lock and then finds the stamp.
    lock_name = f"triode-npm-ci-{hashlib.sha256(str(HERE).encode()).hexdigest()[:16]}.lock"
    with open(Path(tempfile.gettempdir()) / lock_name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed(digest):
            _npm_ci(npm, digest)
    return NodeClients(node=node, codex=[node, str(CODEX_JS)], claude=[str(CLAUDE)],
                       scripts=HERE / "ts")


@pytest.fixture(scope="session")
def triode() -> Iterator[Server]:
    """One triode on the bundled model with default flags, shared by the client tests."""
    with run_server() as server:
        yield server
