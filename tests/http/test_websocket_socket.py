"""The WebSocket handler in process, over a fake socket and a fake turn service: the paths no
real request reaches today (a streamed response that ends `failed`)."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import attrs
import pytest
import trio

from triode.errors import InvalidRequest
from triode.http import websocket as ws_module
from triode.http.websocket import Socket
from triode.service.keeping import LocalResponses
from triode.tenants import DEFAULT_CALLER


class FakeWebSocket:
    """quart's `websocket` as Socket uses it: frames in from a channel, frames out to a list."""

    def __init__(self) -> None:
        self.scope: dict[str, Any] = {}
        self.sent: list[dict[str, Any]] = []
        self.incoming, self._frames = trio.open_memory_channel[str](16)
        self._changed = trio.Event()

    async def receive(self) -> str:
        return await self._frames.receive()

    async def send(self, text: str) -> None:
        self.sent.append(json.loads(text))
        self._changed.set()
        self._changed = trio.Event()

    async def frames(self, count: int) -> list[dict[str, Any]]:
        while len(self.sent) < count:
            await self._changed.wait()
        return self.sent[:count]


@attrs.define
class FakeHandle:
    response_id: str
    status: str

    async def follow_batches(self, starting_after: int = -1
                             ) -> AsyncIterator[list[dict[str, Any]]]:
        response = {"id": self.response_id, "status": self.status, "output": []}
        yield [{"type": "response.created", "sequence_number": 0,
                "response": {**response, "status": "in_progress"}}]
        yield [{"type": f"response.{self.status}", "sequence_number": 1,
                "response": response}]

    async def wait(self) -> None:
        return None


@attrs.frozen
class FakeStarted:
    handle: FakeHandle


class FakeTurns:
    """Continues only what `local` remembers, as `Preparer._earlier` does for a store: false
    id; each create ends with the status its input names."""

    def __init__(self) -> None:
        self.local: LocalResponses | None = None

    async def create(self, caller: Any, req: Any, local: LocalResponses) -> FakeStarted:
        self.local = local
        if req.previous_response_id is not None \
                and local.history(req.previous_response_id) is None:
            raise InvalidRequest("not found", param="previous_response_id",
                                 code="previous_response_not_found")
        return FakeStarted(FakeHandle(f"resp_{req.input}", req.input))

    async def abandon(self, caller: Any, handle: FakeHandle) -> None:
        return None


@pytest.fixture
def fake_socket(monkeypatch: pytest.MonkeyPatch) -> FakeWebSocket:
    fake = FakeWebSocket()
    monkeypatch.setattr(ws_module, "websocket", fake)
    return fake


def create(**body: Any) -> str:
    return json.dumps({"type": "response.create", "model": "m", "store": False, **body})


async def test_a_continuation_that_ends_failed_evicts_what_it_continued(fake_socket):
    """A streamed continuation ending `response.failed` evicts the response it continued
    before its terminal frame is sent: continuing that id again is not found."""
    turns = FakeTurns()
    async with trio.open_nursery() as nursery:
        socket = Socket(turns, nursery, DEFAULT_CALLER)  # type: ignore[arg-type]
        nursery.start_soon(socket.serve)
        socket._local.remember("resp_first", [])
        socket._local.remember("resp_other", [])
        await fake_socket.incoming.send(create(input="failed",
                                               previous_response_id="resp_first"))
        sent = await fake_socket.frames(2)
        assert sent[-1]["type"] == "response.failed"
        assert socket._local.history("resp_first") is None
        assert socket._local.history("resp_other") == []
        await fake_socket.incoming.send(create(input="completed",
                                               previous_response_id="resp_first"))
        refused = (await fake_socket.frames(3))[-1]
        assert refused["type"] == "error"
        assert refused["error"]["code"] == "previous_response_not_found"
        await fake_socket.incoming.send(create(input="incomplete",
                                               previous_response_id="resp_other"))
        assert (await fake_socket.frames(5))[-1]["type"] == "response.incomplete"
        assert socket._local.history("resp_other") == []   # only failures evict
        nursery.cancel_scope.cancel()
