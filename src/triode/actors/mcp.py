"""The MCP connection pool: one long-lived connection per (tenant, server, credentials
digest), shared by every request that names it, closed once idle or at shutdown.

The pool owns the table of connections and their statistics (calls, failures and time per
server label). Each connection is a task in the pool's nursery that opens the session (the
turn service's `Opener`: the `mcp` SDK's transports), keeps it open while requests lease it
and for `idle` seconds after the last one, then closes it (a stdio server's child process
with it). A lease hands the session to the leasing task, which calls it directly, so a
cancelled response cancels its own call (the SDK tells the server). A request never sees
another key's session: the key holds the tenant and a digest of the credentials.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, AsyncContextManager, AsyncIterator, Callable

import attrs
import outcome
import trio

log = logging.getLogger(__name__)

Opener = Callable[[], AsyncContextManager[Any]]
MAILBOX = 64
RELEASE_TIMEOUT = 5.0


@attrs.frozen
class ConnectionKey:
    """Which connection a request may share: its tenant's scope, the server (a configured
    label, or the URL without credentials), and a digest of the credentials it sends."""

    scope: str
    server: str
    credentials: str
    label: str = attrs.field(eq=False)   # how logs and /metrics name it


@attrs.frozen
class ServerFigures:
    """One server label's calls so far: listings, calls, failed calls, and the seconds the
    calls took in all."""

    label: str
    listings: int = 0
    listing_failures: int = 0
    calls: int = 0
    failures: int = 0
    seconds: float = 0.0


@attrs.frozen
class McpStatistics:
    connections: int
    servers: tuple[ServerFigures, ...]


class _Connection:
    """The pool's record of one connection; a leaser holds it only as the token it hands
    back with its release."""

    def __init__(self, key: ConnectionKey) -> None:
        self.key = key
        self.session: Any = None
        self.error: BaseException | None = None
        self.settled = False                    # opened, or failed to
        self.waiters: list[Reply] = []          # leases answered once it settles
        self.leases = 0
        self.changed = trio.Event()
        self.scope = trio.CancelScope()

    def touch(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


# A lease's answers: its token at once, then (when the connection settles) the session or
# the error its open raised.
Reply = trio.MemorySendChannel[Any]


@attrs.frozen
class _Lease:
    key: ConnectionKey
    opener: Opener
    reply: Reply


@attrs.frozen
class _Release:
    connection: _Connection
    broken: bool


@attrs.frozen
class _Record:
    label: str
    kind: str          # "listing" | "call"
    ok: bool
    seconds: float


@attrs.frozen
class _Stats:
    reply: trio.MemorySendChannel[McpStatistics]


class McpPool:
    def __init__(self, *, idle: float = 300.0) -> None:
        """`idle`: seconds a connection no request holds stays open."""
        self._idle = idle
        self._connections: dict[ConnectionKey, _Connection] = {}
        self._figures: dict[str, ServerFigures] = {}
        self._send, self._inbox = trio.open_memory_channel[Any](MAILBOX)

    async def run(self, *, task_status: trio.TaskStatus[McpPoolHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started(McpPoolHandle(self._send))
            async for msg in self._inbox:
                match msg:
                    case _Lease():
                        self._lease(nursery, msg)
                    case _Release(connection=c, broken=broken):
                        c.leases -= 1
                        if broken:   # the session failed under a call: the next lease reopens
                            self._forget(c)
                            c.scope.cancel()
                        c.touch()
                    case _Record():
                        self._record(msg)
                    case _Stats(reply=reply):
                        with contextlib.suppress(trio.BrokenResourceError):
                            reply.send_nowait(self.statistics())
            nursery.cancel_scope.cancel()

    def _lease(self, nursery: trio.Nursery, msg: _Lease) -> None:
        connection = self._connections.get(msg.key)
        if connection is None:
            connection = self._connections[msg.key] = _Connection(msg.key)
            nursery.start_soon(self._hold, connection, msg.opener)
        connection.leases += 1
        connection.touch()
        msg.reply.send_nowait(connection)
        if connection.settled:
            self._answer(connection, msg.reply)
        else:
            connection.waiters.append(msg.reply)

    @staticmethod
    def _answer(connection: _Connection, reply: Reply) -> None:
        result = outcome.Value(connection.session) if connection.error is None \
            else outcome.Error(connection.error)
        with contextlib.suppress(trio.BrokenResourceError, trio.WouldBlock):
            reply.send_nowait(result)

    def _settle(self, connection: _Connection) -> None:
        connection.settled = True
        waiters, connection.waiters = connection.waiters, []
        for reply in waiters:
            self._answer(connection, reply)

    def _forget(self, connection: _Connection) -> None:
        if self._connections.get(connection.key) is connection:
            del self._connections[connection.key]

    async def _hold(self, connection: _Connection, opener: Opener) -> None:
        """One connection's life: open, serve leases, close after `idle` seconds unleased."""
        label = connection.key.label
        try:
            with connection.scope:
                async with opener() as session:
                    connection.session = session
                    self._settle(connection)
                    log.debug("mcp: connected to %s", label)
                    while True:
                        if connection.leases:
                            await connection.changed.wait()
                            continue
                        with trio.move_on_after(self._idle):
                            await connection.changed.wait()
                            continue
                        break
        except Exception as exc:  # the open, or the session, failed: its leasers are told
            connection.error = exc
            log.info("mcp: connection to %s ended: %s", label, describe(exc))
        finally:
            self._forget(connection)
            if connection.error is None and not connection.settled:
                connection.error = ConnectionError("the connection was closed")
            self._settle(connection)   # whoever still waits is told
            log.debug("mcp: closed %s", label)

    def _record(self, msg: _Record) -> None:
        figures = self._figures.get(msg.label, ServerFigures(msg.label))
        if msg.kind == "listing":
            figures = attrs.evolve(figures, listings=figures.listings + 1,
                                   listing_failures=figures.listing_failures + (not msg.ok))
        else:
            figures = attrs.evolve(figures, calls=figures.calls + 1,
                                   failures=figures.failures + (not msg.ok),
                                   seconds=figures.seconds + msg.seconds)
        self._figures[msg.label] = figures

    def statistics(self) -> McpStatistics:
        return McpStatistics(len(self._connections),
                             tuple(self._figures[k] for k in sorted(self._figures)))


def describe(exc: BaseException) -> str:
    """One line for an error, however deep in exception groups it sits."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class McpPoolHandle:
    def __init__(self, send: trio.MemorySendChannel[Any]) -> None:
        self._send = send

    @contextlib.asynccontextmanager
    async def session(self, key: ConnectionKey, opener: Opener) -> AsyncIterator[Any]:
        """The session of `key`'s connection (opened by `opener` if there is none), held
        for the block. An error the open raised is raised here. An exception out of the
        block other than a cancellation marks the session broken: it is closed, and the
        next lease opens a new one."""
        reply_send, reply = trio.open_memory_channel[Any](2)
        await self._send.send(_Lease(key, opener, reply_send))
        with trio.CancelScope(shield=True):   # answered as soon as the pool reads it
            token = await reply.receive()
        opened = broken = False
        try:
            result: outcome.Outcome[Any] = await reply.receive()
            session = result.unwrap()
            opened = True
            yield session
        except Exception:
            broken = opened   # not the open's own error: the session failed under the block
            raise
        finally:
            with trio.move_on_after(RELEASE_TIMEOUT, shield=True):
                await self._send.send(_Release(token, broken))

    async def record(self, label: str, kind: str, ok: bool, seconds: float = 0.0) -> None:
        await self._send.send(_Record(label, kind, ok, seconds))

    async def statistics(self) -> McpStatistics:
        send, receive = trio.open_memory_channel[McpStatistics](1)
        await self._send.send(_Stats(send))
        return await receive.receive()
