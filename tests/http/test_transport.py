"""TimedTCPServer's write in process (hypercorn's connection server over a fake stream, trio's
MockClock): a write the client takes nothing of is cut after the write timeout and closes the
connection; a slow reader that keeps taking pieces never is; a shutdown bounds every write."""

from __future__ import annotations

import math

import pytest
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, RawData

from triode.http.transport import WRITE_PIECE_BYTES, TimedTCPServer


class Stream:
    """The client's socket: it takes a piece every `secs_per_piece` seconds (never when
    None) and records what it took and whether it was closed."""

    def __init__(self, secs_per_piece: float | None) -> None:
        self.secs_per_piece = secs_per_piece
        self.taken = 0
        self.closed = False

    async def send_all(self, data: bytes) -> None:
        if self.secs_per_piece is None:
            await trio.sleep_forever()
        await trio.sleep(self.secs_per_piece)
        self.taken += len(data)

    async def send_eof(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class Protocol:
    """hypercorn's protocol as the write tells it the connection closed."""

    def __init__(self) -> None:
        self.told: list[object] = []

    async def handle(self, event: object) -> None:
        self.told.append(event)


class Context:
    """hypercorn's worker context: `terminated` is set when the worker starts stopping."""

    def __init__(self) -> None:
        self.terminated = trio.Event()


def server(stream: Stream, write_timeout: float, context: Context | None = None
           ) -> TimedTCPServer:
    """A connection's server as `run` leaves it once the connection is up."""
    tcp = TimedTCPServer(None, Config(), context, None, stream)  # type: ignore[arg-type]
    tcp.write_timeout = write_timeout
    tcp.protocol = Protocol()  # type: ignore[assignment]
    tcp._writes = set()
    return tcp


async def test_a_write_the_client_takes_nothing_of_is_cut_and_closes(autojump_clock):
    """After `write_timeout` seconds without a piece taken, the write ends, the connection
    is closed and the protocol is told so (the response then ends as a disconnect)."""
    stream = Stream(secs_per_piece=None)
    tcp = server(stream, write_timeout=30)
    began = trio.current_time()
    await tcp.protocol_send(RawData(b"x" * 100))
    assert trio.current_time() - began == 30
    assert stream.closed and stream.taken == 0
    assert [type(e) for e in tcp.protocol.told] == [Closed]  # type: ignore[attr-defined]


async def test_a_slow_reader_that_keeps_taking_pieces_is_never_cut(autojump_clock):
    """Each piece restarts the timeout: a write that takes far longer than it in all, a
    piece at a time, completes."""
    stream = Stream(secs_per_piece=20)
    tcp = server(stream, write_timeout=30)
    await tcp.protocol_send(RawData(b"x" * (5 * WRITE_PIECE_BYTES)))
    assert stream.taken == 5 * WRITE_PIECE_BYTES
    assert not stream.closed
    assert tcp.protocol.told == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("grace, graceful_timeout, cut_after", [(7, 60, 7), (7, 3, 3)])
async def test_a_shutdown_bounds_a_write_under_way(autojump_clock, nursery, grace,
                                                   graceful_timeout, cut_after):
    """With no write timeout, a stalled write still ends once the worker has been stopping
    for the shutdown's grace (--shutdown-timeout + FLUSH_SECS), or hypercorn's own
    graceful_timeout if that is shorter."""
    stream, context = Stream(secs_per_piece=None), Context()
    tcp = server(stream, write_timeout=math.inf, context=context)
    tcp.shutdown_grace = grace
    tcp.config.graceful_timeout = graceful_timeout
    nursery.start_soon(tcp._cut_writes_at_shutdown)
    began = trio.current_time()
    ended = trio.Event()

    async def write() -> None:
        await tcp.protocol_send(RawData(b"x"))
        ended.set()

    nursery.start_soon(write)
    await trio.sleep(2)
    assert not ended.is_set()
    context.terminated.set()
    await ended.wait()
    assert trio.current_time() - began == 2 + cut_after
    assert stream.closed
