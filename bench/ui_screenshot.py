"""Saves a screenshot of the live page (`/ui`) under load: docs/ui.png.

Starts a real triode (two slots, so some jobs wait in the queue), finishes a few short
responses (the recent list and the prompt cache), starts long background jobs and a
streaming one, lets the plots fill for a while, then has headless Chromium take the page at
1280 px wide. Everything is cancelled afterwards.

    PYTHONPATH=src python bench/ui_screenshot.py [--out docs/ui.png] [--seconds 20]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "ui.png"))
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="how long the load runs before the screenshot")
    args = parser.parse_args()
    hold = {k: v for k, v in HOLD.items() if k != "stream"}
    with run_server("--parallel", "2") as server:
        http = server.http
        for word in ("amber", "basalt", "cedar", "amber"):
            http.post("/v1/responses", json={"model": MODEL, "input": f"Reply with: {word}"})
        jobs = [http.post("/v1/responses", json={**hold, "background": True}).json()["id"]
                for _ in range(3)]
        stop = threading.Event()

        def stream() -> None:
            with httpx.Client(base_url=server.base_url, timeout=120) as client, \
                    client.stream("POST", "/v1/responses", json=HOLD) as r:
                for _ in r.iter_lines():
                    if stop.is_set():
                        return

        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        with browser() as context, page_on(context, server.base_url + "/ui",
                                           viewport=DESKTOP) as (page, errors):
            page.wait_for_selector("#conn[data-state=live]")
            time.sleep(args.seconds)
            page.screenshot(path=args.out, full_page=True)
            assert not errors, errors
        stop.set()
        for rid in jobs:
            http.post(f"/v1/responses/{rid}/cancel")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
