"""`triode serve [flags]`: flags and environment → Settings → the actor tree and hypercorn.

    trio.run(serve, settings)
    └── root nursery
        ├── system.start_actors   (the actor tree; the same start path plain hypercorn uses)
        └── hypercorn.trio.serve(http.app.create_app(handles))
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any, Sequence

import trio

from . import settings as settings_mod
from .errors import SettingsError
from .settings import Settings

log = logging.getLogger("triode")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triode", description="OpenAI Responses API server "
                                     "for local MLX models")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_parser = sub.add_parser("serve", help="start the server")
    settings_mod.add_arguments(serve_parser)
    args = parser.parse_args(argv)
    try:
        settings = settings_mod.resolve(vars(args))
    except SettingsError as exc:
        parser.exit(2, f"triode: {exc}\n")
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        trio.run(serve, settings)
    except KeyboardInterrupt:
        pass
    return 0


async def serve(settings: Settings) -> None:
    """Serves until SIGINT or SIGTERM; then hypercorn shuts down gracefully (open streams
    get `graceful_timeout`) and the actor tree is cancelled: live responses end with the
    process, the engine thread ends at its next exchange."""
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    from .http.app import create_app
    from .http.body import MAX_BODY_BYTES
    from .system import start_actors

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async def stop_requested() -> None:
            async for signum in signals:
                log.info("%s received: shutting down", signal.Signals(signum).name)
                return

        async with trio.open_nursery() as nursery:
            handles = await nursery.start(start_actors, settings)
            config = Config()
            config.bind = [f"{settings.host}:{settings.port}"]
            config.accesslog = None
            config.graceful_timeout = 2.0
            # A WebSocket frame may be as large as a request body (hypercorn's default is
            # 16 MiB, past which it closes the socket before triode sees the frame).
            config.websocket_max_message_size = MAX_BODY_BYTES

            async def serve_then_stop(*, task_status: Any) -> None:
                await hypercorn_serve(create_app(handles), config,
                                      shutdown_trigger=stop_requested, task_status=task_status)
                nursery.cancel_scope.cancel()

            binds = await nursery.start(serve_then_stop)
            for bind in binds:
                # Tests and scripts read this line to find a port chosen with --port 0.
                print(f"triode listening on {bind}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
