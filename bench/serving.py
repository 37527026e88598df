"""A triode server for a bench: `python -m triode serve --port 0 FLAGS` in a process of its
own, its URL read off its listening line, and its stderr drained from then on (a full pipe
would block the server's logging, and with it the server)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading


def start(*flags: str, log: list[str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """The server's process and base URL; what it logs after starting goes to `log` (or
    nowhere)."""
    proc = subprocess.Popen([sys.executable, "-m", "triode", "serve", "--port", "0",
                             "--log-level", "warning", *flags],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    stderr = proc.stderr
    for line in stderr:
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            def drain() -> None:
                for line in stderr:
                    if log is not None:
                        log.append(line)

            threading.Thread(target=drain, daemon=True).start()
            return proc, found.group(1)
    raise RuntimeError("triode did not start")
