"""A real headless browser for the live page's tests: Debian's Chromium, driven by Python
Playwright over its own protocol (no browser download: `executable_path`).

`ensure_chromium()` installs Debian's `chromium` package when /usr/bin/chromium is missing
and the tests run as root (CI: a machine with Python and apt only); when it cannot, the
tests fail saying why, they never skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

CHROMIUM = Path(os.environ.get("TRIODE_TEST_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def ensure_chromium() -> Path:
    """The Chromium binary, installed with apt-get first if it is missing. The tests run in
    two worker processes (pytest-xdist): the first to get here installs, under a file lock,
    and the other waits for it instead of meeting dpkg's own lock."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(f"{CHROMIUM} is missing and cannot be installed here (needs root "
                           "and apt-get): install Debian's `chromium` package")
    with open(Path(tempfile.gettempdir()) / "triode-tests-chromium.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not CHROMIUM.exists():
            _install()
    return CHROMIUM


def _install() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}"
                               f"{done.stderr[-2000:]}")
    if not CHROMIUM.exists():
        raise RuntimeError(f"apt-get installed chromium, but {CHROMIUM} is still missing")


@contextlib.contextmanager
def browser() -> Iterator[object]:
    """A Chromium with a fresh profile, for the length of the block."""
    from playwright.sync_api import sync_playwright

    binary = ensure_chromium()
    with tempfile.TemporaryDirectory(prefix="triode-chromium-") as profile, \
            sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=str(binary), args=FLAGS, headless=True,
            viewport=DESKTOP)
        try:
            yield context
        finally:
            context.close()


@contextlib.contextmanager
def page_on(context, url: str, *, key: str | None = None, viewport: dict | None = None
            ) -> Iterator[tuple[object, list[str]]]:
    """A new tab at `url` (with `key` already in its sessionStorage, as if typed in) and the
    console errors and page errors it reports."""
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    if viewport:
        page.set_viewport_size(viewport)
    if key is not None:
        page.add_init_script(f"sessionStorage.setItem('triode.apiKey', {key!r});")
    page.goto(url)
    try:
        yield page, errors
    finally:
        page.close()
