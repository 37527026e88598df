"""TimedTCPServer: hypercorn's trio TCP server with a write timeout, so no client can hold a
connection (or the shutdown) by not reading, and with connections closed as soon as their
client is gone.

hypercorn 0.18 writes every response byte in `TCPServer.protocol_send` as
`with CancelScope(shield=True): await stream.send_all(data)`: the shield keeps a cancelled
app from leaving half a frame on a connection that is then reused. It also means nothing can
end a write the client never takes: a reader that stops (or reads 1 byte a second) holds the
write, the response's tasks and the socket for as long as it stays connected, and hypercorn's
graceful shutdown (which cancels its connection nursery at `graceful_timeout`) cannot get
past the shield either, so SIGINT/SIGTERM never finish while such a reader is attached.

The fix belongs in that layer, so this is a subclass that overrides only `protocol_send`'s
write: the same shielded write under the same lock, with its own deadline (a shield stops
cancellation from outside, not the scope's own deadline):

- `--write-timeout` seconds after the write began or last took a piece of
  `WRITE_PIECE_BYTES` (the client has taken no piece for that long: a 1 byte/s reader never
  frees the window a piece needs, while a slow reader that keeps reading is never cut,
  however large the write);
- and once the worker is shutting down (hypercorn's `context.terminated`), no later than
  `--shutdown-timeout` + FLUSH_SECS after that: the running responses have finished or
  been cut by then and their last events had FLUSH_SECS to be written (and never later
  than hypercorn's own `graceful_timeout`, when it cancels the connections anyway).

A write cut by either deadline closes the connection, as a client that went away would: the
app gets `http.disconnect`, and the response that was streaming ends `cancelled` (an SSE
disconnect, `docs/cancellation.md`), or `failed` if the shutdown already cut it.

A second fault of the same class: when the client closes an idle keep-alive connection,
hypercorn's read loop ends at once, but its connection task group still waits for the
keep-alive timer task, so the socket sits in CLOSE-WAIT (and its tasks stay) for
`keep_alive_timeout` (5 s) after the client left. Here the timer stops when the read loop
ends, and the connection closes then.

`install(write_timeout, shutdown_timeout)` makes hypercorn's trio worker use it.
`worker_serve` looks the class up by name when it starts serving, after the app's lifespan
startup, so `triode serve` installs it before serving and the app factory under plain
hypercorn installs it from its lifespan startup.
"""

from __future__ import annotations

import logging
import math

import trio
from hypercorn.events import Closed, Event, RawData
from hypercorn.trio import run as hypercorn_run
from hypercorn.trio.tcp_server import TCPServer

log = logging.getLogger(__name__)

# After the drain, the time the last events get to be written before the connections that
# still have something to write (or an idle WebSocket) are cut.
FLUSH_SECS = 3.0


# A write's timeout runs per piece of this size: a client has to take one in time.
WRITE_PIECE_BYTES = 16 * 1024


class TimedTCPServer(TCPServer):
    # Seconds a write may wait for the client to take it (`--write-timeout`), and what a
    # shutdown leaves writes (`--shutdown-timeout` + FLUSH_SECS); install() sets both.
    write_timeout: float = math.inf
    shutdown_grace: float = math.inf
    _shutdown_deadline = math.inf   # set once the worker stops

    async def run(self) -> None:
        self._writes: set[trio.CancelScope] = set()   # the write under way, if any
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._cut_writes_at_shutdown)
            try:
                await super().run()
            finally:
                nursery.cancel_scope.cancel()

    async def _read_data(self) -> None:
        await super()._read_data()
        # The client has gone (end of stream, a reset or --read-timeout): no keep-alive
        # timer holds the connection open now. A response still being written ends on its
        # own (its write fails, or hypercorn closes the connection when it has finished).
        await self.idle_task.stop()

    async def _cut_writes_at_shutdown(self) -> None:
        """Once the worker stops, every write (this one, and any later) ends by the time
        hypercorn gives up on its connections."""
        await self.context.terminated.wait()
        self._shutdown_deadline = trio.current_time() + self._shutdown_limit()
        for scope in self._writes:
            scope.deadline = min(scope.deadline, self._shutdown_deadline)

    def _shutdown_limit(self) -> float:
        return min(self.shutdown_grace, self.config.graceful_timeout)

    async def protocol_send(self, event: Event) -> None:
        if not isinstance(event, RawData):
            await super().protocol_send(event)
            return
        async with self.send_lock:
            timed_out = trio.current_time() + self.write_timeout
            deadline = min(timed_out, self._shutdown_deadline)
            broken = False
            data = memoryview(event.data)
            with trio.CancelScope(shield=True, deadline=deadline) as write:
                self._writes.add(write)
                try:
                    # In pieces, each with the whole timeout: a slow reader that keeps taking
                    # a piece within it is never cut, however large the write.
                    for start in range(0, len(data), WRITE_PIECE_BYTES):
                        await self.stream.send_all(data[start:start + WRITE_PIECE_BYTES])
                        timed_out = trio.current_time() + self.write_timeout
                        write.deadline = min(timed_out, self._shutdown_deadline)
                except (trio.BrokenResourceError, trio.ClosedResourceError,
                        # hypercorn's _close() (send_eof) is under way in another task: the
                        # connection is closing, this write is moot.
                        trio.BusyResourceError):
                    broken = True
                finally:
                    self._writes.discard(write)
            if write.cancelled_caught:
                log.info("closing the connection from %s: it took nothing of a %d-byte piece "
                         "(of a %d-byte write) in %g s", _peer(self),
                         min(WRITE_PIECE_BYTES, len(event.data)), len(event.data),
                         self.write_timeout if write.deadline == timed_out else
                         self._shutdown_limit())
                with trio.CancelScope(shield=True):
                    await self._close()
                broken = True
        if broken:
            await self.protocol.handle(Closed())


def _peer(server: TCPServer) -> str:
    try:
        host, port, *_ = server.stream.socket.getpeername()
        return f"{host}:{port}"
    except (OSError, AttributeError, ValueError):
        return "a client"


def install(write_timeout: float, shutdown_timeout: float) -> None:
    """hypercorn's trio worker serves its connections with TimedTCPServer from now on."""
    TimedTCPServer.write_timeout = write_timeout
    TimedTCPServer.shutdown_grace = shutdown_timeout + FLUSH_SECS
    setattr(hypercorn_run, "TCPServer", TimedTCPServer)   # the name worker_serve reads
