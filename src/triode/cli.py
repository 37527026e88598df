"""`triode serve [flags]`: flags and environment → Settings → the actor tree and hypercorn.

    trio.run(serve, settings)
    └── root nursery
        ├── system.start_actors   (the actor tree; the same start path plain hypercorn uses)
        └── hypercorn (http.app.create_app(handles)) on sockets bound before the model loads

A setting that cannot start the server is one line on stderr, `triode: --flag: ...`, and
a non-zero exit: flags out of range at parse time (exit 2), then the port (bound before the
model loads, so a port in use fails at once) and the model (exit 1).

Shutdown (SIGTERM or SIGINT): hypercorn stops accepting connections and closes idle ones;
the registry drains (no new responses, up to `--shutdown-timeout` for the running ones, then
the rest end `failed`) while hypercorn keeps serving the connections in flight, so every
stream gets its terminal event and every request its response; then the tree stops. A
second signal cuts the running responses at once.

`--distributed` (docs/deployment.md): every rank runs this same command. Each joins the
group first (waiting for the others); rank 0 then serves as above, every other rank runs
only its engine (`system.follow`) until rank 0's engine ends. Rank 0 leaves with
`os._exit`: its engine thread may be hung in a collective for good (a rank that stalled),
and nothing must wait for it. Once the group failed, `--distributed-on-failure exit` shuts
rank 0 down as a signal would, with exit status 1.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Sequence

import trio

from . import settings as settings_mod
from .errors import SettingsError
from .settings import Settings

if TYPE_CHECKING:
    from hypercorn.config import Config, Sockets

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
    from .system import startup_error

    if settings.distributed != "off":
        return distributed(settings)
    try:
        trio.run(serve, settings)
    except KeyboardInterrupt:
        pass
    except (SettingsError, BaseExceptionGroup) as exc:
        error = startup_error(exc)
        if error is None:
            raise
        print(f"triode: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


def distributed(settings: Settings) -> int:
    """One rank of a --distributed group (module docstring)."""
    from .model.blas import preload_blas
    from .model.lockstep import join
    from .system import checked_catalog, follow, startup_error

    preload_blas(settings.blas)   # before anything imports MLX (the group does)
    try:
        checked_catalog(settings)   # before waiting for the other ranks
        rank = join().rank()
    except SettingsError as exc:
        print(f"triode: {exc}", file=sys.stderr, flush=True)
        return 1
    if rank == 0:
        code = 1
        try:
            code = trio.run(serve, settings)
        except KeyboardInterrupt:
            code = 0
        except BaseException as exc:
            error = startup_error(exc)
            if error is None:
                log.exception("rank 0 failed")
            else:
                print(f"triode: {error}", file=sys.stderr, flush=True)
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    try:
        follow(settings)
    except SettingsError as exc:
        print(f"triode: rank {rank}: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:   # the group broke (a rank died) or this rank diverged
        log.error("rank %d: stopping: %s: %s", rank, type(exc).__name__, exc)
        return 1
    log.info("rank %d: rank 0 stopped the group", rank)
    return 0


def hypercorn_config(settings: Settings) -> Config:
    """hypercorn's Config for `settings`."""
    from hypercorn.config import Config

    from .actors.registry import CUT_GRACE
    from .http.body import MAX_BODY_BYTES
    from .http.transport import FLUSH_SECS

    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = None
    # Connections in flight are served until the drain has ended every response (the
    # shutdown timeout, then the cut ones' own cleanup) and the last events are written.
    config.graceful_timeout = settings.shutdown_timeout + CUT_GRACE + FLUSH_SECS
    # A WebSocket frame may be as large as a request body (hypercorn's default is
    # 16 MiB, past which it closes the socket before triode sees the frame).
    config.websocket_max_message_size = MAX_BODY_BYTES
    return config


def bind(config: Config, settings: Settings) -> Sockets:
    """hypercorn's sockets, bound (not yet listening): a port in use or an address that is
    not this machine's is a SettingsError naming --host/--port before the model loads."""
    where = f"--host/--port: {settings.host}:{settings.port}"
    try:
        return config.create_sockets()
    except socket.gaierror as exc:
        raise SettingsError(f"--host: {settings.host}: cannot resolve it ({exc.strerror})"
                            ) from None
    except OSError as exc:
        reason = {errno.EADDRINUSE: "address already in use",
                  errno.EACCES: "permission denied (a port under 1024 needs privileges)",
                  errno.EADDRNOTAVAIL: "not an address of this machine"}.get(
                      exc.errno or 0, exc.strerror or str(exc))
        raise SettingsError(f"{where}: {reason}") from None


async def serve(settings: Settings) -> int:
    """Serves until SIGINT or SIGTERM (or, under --distributed with `exit`, the group's
    failure), then shuts down gracefully (module docstring); returns the exit status."""
    from hypercorn.trio.run import worker_serve
    from hypercorn.utils import wrap_app

    from .http.app import create_app
    from .http.transport import FLUSH_SECS, install
    from .system import Handles, start_actors

    install(settings.write_timeout, settings.shutdown_timeout)
    config = hypercorn_config(settings)
    sockets = bind(config, settings)
    handles: Handles | None = None
    stopping = trio.Event()
    served = trio.Event()
    status = 0
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def on_signals() -> None:
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        if handles is None:
                            log.info("%s received while starting: stopping", name)
                            nursery.cancel_scope.cancel()
                            return
                        live = (await handles.registry.statistics()).live
                        if not stopping.is_set():
                            log.info("%s received: shutting down; no new connections; waiting "
                                     "up to %g s (--shutdown-timeout) for %d running "
                                     "response%s", name, settings.shutdown_timeout, live,
                                     "" if live == 1 else "s")
                            stopping.set()
                        else:
                            log.warning("%s received again: ending the %d running "
                                        "response%s now", name, live, "" if live == 1 else "s")
                            nursery.start_soon(handles.registry.drain, 0.0)

                async def serve_http(*, task_status: trio.TaskStatus[list[str]]) -> None:
                    try:
                        app = create_app(handles, access_log=settings.access_log == "on")
                        await worker_serve(wrap_app(app, config.wsgi_max_body_size, None), config,
                                           sockets=sockets, shutdown_trigger=stopping.wait,
                                           task_status=task_status)
                    finally:
                        served.set()

                async def on_group_failure() -> None:
                    nonlocal status
                    assert handles is not None and handles.group is not None
                    await handles.group.failed.wait()
                    if settings.distributed_on_failure == "exit":
                        log.error("--distributed: the group failed (%s); shutting down "
                                  "(--distributed-on-failure exit)", handles.group.reason)
                        status = 1
                        stopping.set()

                nursery.start_soon(on_signals)
                handles = await nursery.start(start_actors, settings)
                if handles.group is not None:
                    nursery.start_soon(on_group_failure)
                for sock in sockets.insecure_sockets:
                    sock.listen(config.backlog)
                binds = await nursery.start(serve_http)
                for address in binds:
                    # Tests and scripts read this line to find a port chosen with --port 0.
                    print(f"triode listening on {address}", file=sys.stderr, flush=True)
                await stopping.wait()
                report = await handles.registry.drain(settings.shutdown_timeout)
                log.info("shutdown: %d response%s finished, %d cut", report.finished,
                         "" if report.finished == 1 else "s", len(report.cut))
                with trio.move_on_after(FLUSH_SECS):
                    await served.wait()
                nursery.cancel_scope.cancel()
    finally:
        for sock in sockets.insecure_sockets:
            sock.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
