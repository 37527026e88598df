"""Saves a screenshot of the live page (`/ui`) under load: docs/ui.png.

Starts a real triode (four slots) and loads it: long
background jobs kept running, short turns that continue each other (prompt-cache hits) and a
streaming response; lets the page's plots fill for a while, then has headless Chromium take
the page at 1280 px wide. The jobs are cancelled afterwards.

    PYTHONPATH=src python bench/ui_screenshot.py [--out docs/ui.png] [--seconds 90]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import run_server  # noqa: E402
from tests.e2e.browser import DESKTOP, browser, page_on  # noqa: E402
from tests.e2e.test_spine import HOLD, MODEL  # noqa: E402


WORDS = ("amber", "basalt", "cedar", "dune", "ember", "fjord")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "ui.png"))
    parser.add_argument("--seconds", type=float, default=90.0,
                        help="how long the load runs before the screenshot")
    parser.add_argument("--jobs", type=int, default=2, help="background jobs kept running")
    args = parser.parse_args()
    hold = {k: v for k, v in HOLD.items() if k != "stream"}
    with run_server("--parallel", "4") as server:
        stop = threading.Event()
        jobs: list[str] = []

        def keep_jobs() -> None:
            """Keeps --jobs long background jobs running (or queued)."""
            with httpx.Client(base_url=server.base_url, timeout=60) as http:
                while not stop.is_set():
                    running = [rid for rid in jobs if http.get(f"/v1/responses/{rid}")
                               .json()["status"] in ("queued", "in_progress")]
                    for _ in range(args.jobs - len(running)):
                        jobs.append(http.post("/v1/responses", json={**hold, "background": True})
                                    .json()["id"])
                    stop.wait(1.0)

        def chat() -> None:
            """Short turns, each continuing the last (prompt-cache hits), now and then a new
            conversation; and one streaming response held open."""
            with httpx.Client(base_url=server.base_url, timeout=120) as http:
                previous = None
                for i in itertools.count():
                    if stop.is_set():
                        return
                    body = {"model": MODEL, "input": f"Reply with: {WORDS[i % len(WORDS)]}"}
                    if previous is not None and i % 5:
                        body["previous_response_id"] = previous
                    previous = http.post("/v1/responses", json=body).json()["id"]
                    stop.wait(1.5)

        def stream() -> None:
            with httpx.Client(base_url=server.base_url, timeout=120) as client:
                while not stop.is_set():
                    with client.stream("POST", "/v1/responses", json=HOLD) as r:
                        for _ in r.iter_lines():
                            if stop.is_set():
                                return

        load = [threading.Thread(target=fn, daemon=True) for fn in (keep_jobs, chat, stream)]
        for thread in load:
            thread.start()
        with browser() as context, page_on(context, server.base_url + "/ui",
                                           viewport=DESKTOP) as (page, errors):
            page.wait_for_selector("#conn[data-state=live]")
            time.sleep(args.seconds)
            page.screenshot(path=args.out, full_page=True)
            assert not errors, errors
        stop.set()
        for rid in list(jobs):
            server.http.post(f"/v1/responses/{rid}/cancel")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
