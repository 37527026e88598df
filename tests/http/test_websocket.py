"""The WebSocket handler in process, over a fake socket and a fake turn service: frames in,
frames out, the socket going on after each refusal, and the paths no real request reaches
today (a streamed response that ends `failed`)."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import attrs
import pytest
import trio

from triode.model.request import Sampling
from triode.responses import translate, wire
from triode.responses.builder import ResponseBuilder
from triode.responses.convert import structure
from triode.responses.lifecycle import Status
from triode.responses.objects import ResponseEvent
from triode.errors import InvalidRequest, ServerError
from triode.http import websocket as ws_module
from triode.http.websocket import Socket, _prewarm, error_frame, parse_frame
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
        """The first `count` frames sent, once they are; a test that never gets them fails
        instead of hanging."""
        with trio.fail_after(10):
            while len(self.sent) < count:
                await self._changed.wait()
        return self.sent[:count]


@attrs.define
class FakeHandle:
    response_id: str
    status: str

    async def follow_batches(self, starting_after: int = -1
                             ) -> AsyncIterator[list[ResponseEvent]]:
        response = ResponseBuilder(self.response_id, translate.plan(structure(
            {"model": "m", "input": "hi"}, wire.CreateResponse), Sampling()).echo).obj
        yield [ResponseEvent(type="response.created", sequence_number=0,
                             response=attrs.evolve(response, status=Status.IN_PROGRESS))]
        yield [ResponseEvent(type=f"response.{self.status}", sequence_number=1,
                             response=attrs.evolve(response, status=Status(self.status)))]

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


@pytest.fixture
async def served(fake_socket, nursery) -> FakeWebSocket:
    """A Socket serving `fake_socket` over FakeTurns, until the test ends."""
    nursery.start_soon(Socket(FakeTurns(), nursery, DEFAULT_CALLER).serve)  # type: ignore[arg-type]
    return fake_socket


async def test_a_refused_frame_is_answered_with_an_error_frame_and_the_socket_goes_on(served):
    """A frame that is not JSON, one with an unknown type and one with a bad stream_id each
    get one error frame naming what is wrong; the next create is answered as usual."""
    for frame in ("not json", json.dumps({"type": "response.cancel"}),
                  create(input="completed", stream_id="no spaces")):
        await served.incoming.send(frame)
    await served.incoming.send(create(input="completed"))
    sent = await served.frames(5)
    assert [(f["type"], f.get("status")) for f in sent[:3]] == [("error", 400)] * 3
    assert [f["error"]["code"] for f in sent[1:3]] == ["unsupported_event_type",
                                                       "invalid_stream_id"]
    assert "not valid JSON" in sent[0]["error"]["message"]
    assert [f["type"] for f in sent[3:]] == ["response.created", "response.completed"]


async def test_a_steer_is_answered_steer_failed_with_its_input_returned(served):
    """Steering is not built: a well-formed `response.steer` gets `response.steer.failed`
    (code steering_not_supported, the input given back); a malformed one an error frame
    naming the field; an acknowledgement (`response.processed`) gets no answer at all."""
    await served.incoming.send(json.dumps({"type": "response.processed"}))
    await served.incoming.send(json.dumps({"type": "response.steer",
                                           "previous_response_id": "resp_1", "input": "stop"}))
    await served.incoming.send(json.dumps({"type": "response.steer",
                                           "previous_response_id": "resp_1", "input": "x",
                                           "model": "m"}))
    failed, refused = await served.frames(2)
    assert failed["type"] == "response.steer.failed"
    assert failed["steer"] == {"previous_response_id": "resp_1", "input": "stop"}
    assert failed["error"]["code"] == "steering_not_supported"
    assert (refused["type"], refused["error"]["param"]) == ("error", "model")


async def test_a_named_lane_s_frames_carry_its_stream_id(served):
    """Every frame of a create on a lane names the lane; the default lane's name none."""
    await served.incoming.send(create(input="completed", stream_id="lane.1"))
    await served.incoming.send(create(input="incomplete"))
    sent = await served.frames(4)
    laned = [f for f in sent if "stream_id" in f]
    assert [(f["type"], f["stream_id"]) for f in laned] == [
        ("response.created", "lane.1"), ("response.completed", "lane.1")]
    assert [f["type"] for f in sent if "stream_id" not in f] == [
        "response.created", "response.incomplete"]


def test_an_error_frame_always_has_a_code_and_its_status():
    """The HTTP error body nested with its status; an error without a code of its own
    carries its type as the code."""
    frame = error_frame(ServerError("boom"))
    assert (frame["type"], frame["status"], frame["error"]["code"]) == (
        "error", 500, "server_error")
    coded = error_frame(InvalidRequest("no", param="input", code="bad_input"))
    assert (coded["status"], coded["error"]["code"], coded["error"]["param"]) == (
        400, "bad_input", "input")


@pytest.mark.parametrize("message, says", [
    (b"\xff\xfe", "UTF-8"), ("", "empty"), ("[1]", "JSON object"),
    ('{"type": 1}', "no 'type'")])
def test_a_frame_that_is_not_a_typed_json_object_is_refused_saying_why(message, says):
    """Binary frames must be UTF-8 JSON; a frame must be a non-empty JSON object with a
    string `type`."""
    with pytest.raises(InvalidRequest) as refused:
        parse_frame(message)
    assert says in refused.value.message


def test_prewarm_is_taken_out_of_the_body_and_the_rest_of_its_options_stay():
    """`prompt_cache_options.prewarm` is the socket's to answer; other options go on to the
    create, and a non-boolean prewarm is a 400 naming it."""
    body = {"input": "hi", "prompt_cache_options": {"prewarm": True, "ttl": "1h"}}
    assert _prewarm(body) is True
    assert body == {"input": "hi", "prompt_cache_options": {"ttl": "1h"}}
    only = {"prompt_cache_options": {"prewarm": False}}
    assert _prewarm(only) is False and only == {}
    with pytest.raises(InvalidRequest) as refused:
        _prewarm({"prompt_cache_options": {"prewarm": "yes"}})
    assert refused.value.param == "prompt_cache_options.prewarm"
