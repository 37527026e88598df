"""Responses WebSocket mode end to end: a real server, the bundled model, openai-python's
`client.responses.connect()` and a raw `websockets` client."""

from __future__ import annotations

import json
import socket as sockets

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from ..conftest import run_server, wait_until
from .test_spine import HOLD, MODEL, sse_events

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
RECALL = "Repeat your first answer."


def ws_url(server, path: str = "/v1/responses") -> str:
    return server.base_url.replace("http://", "ws://", 1) + path


def create(ws: ClientConnection, **body) -> None:
    ws.send(json.dumps({"type": "response.create", "model": MODEL, **body}))


def until_end(ws: ClientConnection) -> list[dict]:
    """Frames up to and including a terminal event or an error frame."""
    frames = []
    while True:
        frames.append(json.loads(ws.recv(timeout=60)))
        if frames[-1]["type"] in (*TERMINAL, "error"):
            return frames


def answer(ws: ClientConnection, **body) -> dict:
    """One create's final response object (it must complete)."""
    create(ws, **body)
    last = until_end(ws)[-1]
    assert last["type"] == "response.completed", last
    return last["response"]


def output_text(obj: dict) -> str:
    return "".join(part["text"] for item in obj["output"] if item["type"] == "message"
                   for part in item["content"] if part["type"] == "output_text")


def test_sdk_connect_streams_what_sse_streams(server, client):
    """connect() gets the SSE stream's events in order from 0, ending in the GET object."""
    body = {"model": MODEL, "input": "Reply with: silver 411 lake", "max_output_tokens": 64}
    sse = sse_events(server.http.post("/v1/responses", json={**body, "stream": True}).text)
    frames = []
    with client.responses.connect() as conn:
        conn.response.create(**body)
        while not frames or frames[-1]["type"] not in TERMINAL:
            data = conn.recv_bytes()
            assert conn.parse_event(data).type == json.loads(data)["type"]   # SDK-typed
            frames.append(json.loads(data))
    assert [f["type"] for f in frames] == [e["type"] for e in sse]
    assert [f["sequence_number"] for f in frames] == list(range(len(frames)))
    lifecycle = [e["response"] for e in [*sse, *frames] if "response" in e]
    assert len(lifecycle) >= 6 and all(r["background"] is False for r in lifecycle)
    final = frames[-1]["response"]
    assert output_text(final) == "silver 411 lake"
    assert server.http.get(f"/v1/responses/{final['id']}").json() == final


def test_three_chained_responses_on_one_socket(server):
    """Three creates on one socket chain by previous_response_id through HTTP's store."""
    with connect(ws_url(server, "/responses")) as ws:
        a = answer(ws, input="Reply with: amber falcon", stream=True)
        b = answer(ws, input="Reply with: silver", previous_response_id=a["id"], stream=True)
        c = answer(ws, input=RECALL, previous_response_id=b["id"])
    assert (output_text(a), output_text(b), output_text(c)) == (
        "amber falcon", "silver", "amber falcon")
    stored = server.http.get(f"/v1/responses/{c['id']}").json()
    assert stored["previous_response_id"] == b["id"] and stored["status"] == "completed"
    after = server.client().responses.create(model=MODEL, input=RECALL,
                                             previous_response_id=c["id"])
    assert after.output_text == "amber falcon"


def test_invalid_request_is_an_error_frame_and_the_socket_goes_on(server):
    """An HTTP-400 create is a nested error frame with status and param; the socket goes on."""
    with connect(ws_url(server)) as ws:
        create(ws, input="hi", temperature="hot")
        frame = json.loads(ws.recv(timeout=60))
        assert frame["type"] == "error" and frame["status"] == 400
        assert frame["error"]["type"] == "invalid_request_error"
        assert frame["error"]["param"] == "temperature"
        create(ws, input="hi", previous_response_id="resp_missing")
        frame = json.loads(ws.recv(timeout=60))
        assert (frame["status"], frame["error"]["param"]) == (400, "previous_response_id")
        assert output_text(answer(ws, input="Reply with: ok")) == "ok"


@pytest.mark.parametrize("frame, param, says", [
    ("not json", None, "not valid JSON"),
    ("[1, 2]", None, "JSON object"),
    ('{"model": "m"}', "type", "no 'type'"),
    ('{"type": "session.update"}', "type", "session.update"),
    ('{"type": "response.create", "model": "m", "stream_id": "no spaces"}', "stream_id",
     "stream_id"),
    ('{"type": "response.create", "input": "\\ud800"}', "input", "surrogate"),
    ('{"type": "response.create", "metadata": ' + "[" * 100 + "]" * 100 + "}", "metadata",
     "nested"),
    (b"\xff\xfe", None, "UTF-8"),
])
def test_malformed_frame_gets_an_error_frame(server, frame, param, says):
    """A malformed frame gets a 400 error frame naming the problem; the socket stays usable."""
    with connect(ws_url(server)) as ws:
        ws.send(frame)
        error = json.loads(ws.recv(timeout=60))
        assert error["type"] == "error" and error["status"] == 400
        assert error["error"]["param"] == param and says in error["error"]["message"]
        assert output_text(answer(ws, input="Reply with: ok")) == "ok"


def test_background_is_refused(server):
    """`background: true` is refused with a 400 error frame naming it."""
    with connect(ws_url(server)) as ws:
        create(ws, input="hi", background=True)
        error = json.loads(ws.recv(timeout=60))
        assert (error["status"], error["error"]["param"]) == (400, "background")


@pytest.mark.parametrize("abrupt", [False, True])
def test_closing_the_socket_cancels_the_response(server, abrupt):
    """Closing the socket mid-generation frees the slot and stores the response as cancelled."""
    before = server.health()["generation"]["tokens"]
    ws = connect(ws_url(server))
    create(ws, **{k: v for k, v in HOLD.items() if k != "model"})
    created = json.loads(ws.recv(timeout=60))
    assert created["type"] == "response.created"
    while json.loads(ws.recv(timeout=60))["type"] != "response.output_text.delta":
        pass
    assert server.health()["slots"]["busy"] == 1
    if abrupt:
        ws.socket.shutdown(sockets.SHUT_RDWR)
        ws.socket.close()
    else:
        ws.close()
    wait_until(lambda: server.health()["slots"]["busy"] == 0)
    assert server.health()["generation"]["tokens"] - before < 1000
    wait_until(lambda: server.health()["responses"]["live"] == 0)
    stored = server.http.get(f"/v1/responses/{created['response']['id']}").json()
    assert stored["status"] == "cancelled"


def test_cancel_endpoint_ends_a_socket_response_with_an_error_frame(server):
    """POST .../cancel ends a socket's response with a response_cancelled error frame."""
    with connect(ws_url(server)) as ws:
        create(ws, **{k: v for k, v in HOLD.items() if k != "model"})
        response_id = json.loads(ws.recv(timeout=60))["response"]["id"]
        server.http.post(f"/v1/responses/{response_id}/cancel")
        last = until_end(ws)[-1]
        assert last["type"] == "error" and last["error"]["code"] == "response_cancelled"
        assert output_text(answer(ws, input="Reply with: ok")) == "ok"
    assert server.http.get(f"/v1/responses/{response_id}").json()["status"] == "cancelled"


def test_creates_on_one_lane_queue_in_order(server):
    """A create sent while one runs on its lane starts after the first one's terminal event."""
    with connect(ws_url(server)) as ws:
        create(ws, input="Reply with: amber")
        create(ws, input="Reply with: zebra")
        frames = until_end(ws) + until_end(ws)
    ends = [i for i, f in enumerate(frames) if f["type"] in TERMINAL]
    starts = [i for i, f in enumerate(frames) if f["type"] == "response.created"]
    assert len(ends) == len(starts) == 2 and starts[1] == ends[0] + 1
    assert [output_text(frames[i]["response"]) for i in ends] == ["amber", "zebra"]


def test_stream_id_lanes_run_side_by_side_and_echo_their_id(server):
    """Creates on two stream_id lanes both run, each frame carrying its lane's stream_id."""
    with connect(ws_url(server)) as ws:
        create(ws, input="Reply with: amber", stream_id="left")
        create(ws, input="Reply with: zebra", stream_id="right")
        frames = until_end(ws) + until_end(ws)
        plain = answer(ws, input="Reply with: ok")
    by_lane = {lane: [f for f in frames if f["stream_id"] == lane] for lane in ("left", "right")}
    assert len(by_lane["left"]) + len(by_lane["right"]) == len(frames)
    assert output_text(by_lane["left"][-1]["response"]) == "amber"
    assert output_text(by_lane["right"][-1]["response"]) == "zebra"
    assert "stream_id" not in plain and output_text(plain) == "ok"


def test_store_false_continues_on_its_socket_only(server):
    """A store: false response can be continued on the socket that made it, and on no other."""
    with connect(ws_url(server)) as ws:
        a = answer(ws, input="Reply with: amber falcon", store=False)
        b = answer(ws, input="Reply with: silver", previous_response_id=a["id"], store=False)
        c = answer(ws, input=RECALL, previous_response_id=b["id"], store=False)
        assert output_text(c) == "amber falcon"
        assert (b["previous_response_id"], c["previous_response_id"]) == (a["id"], b["id"])
    assert server.http.get(f"/v1/responses/{a['id']}").status_code == 404
    with connect(ws_url(server)) as other:
        create(other, input=RECALL, previous_response_id=b["id"])
        error = json.loads(other.recv(timeout=60))
        assert error["type"] == "error" and error["error"]["param"] == "previous_response_id"
        assert error["error"]["code"] == "previous_response_not_found"


def test_generate_false_warms_up_without_generating(server):
    """generate: false completes with no output or tokens; its input is the next one's history."""
    tokens = server.health()["generation"]["tokens"]
    with connect(ws_url(server)) as ws:
        create(ws, input="Reply with: amber falcon", generate=False)
        frames = until_end(ws)
        assert [f["type"] for f in frames] == [
            "response.created", "response.in_progress", "response.completed"]
        warm = frames[-1]["response"]
        assert warm["output"] == [] and warm["usage"]["input_tokens"] > 0
        assert server.health()["generation"]["tokens"] == tokens
        reply = answer(ws, input=[], previous_response_id=warm["id"])
    assert output_text(reply) == "amber falcon"


def test_codex_frames(server):
    """Codex's frames: prewarm, store: false deltas after previous_response_id, a silent ack."""
    codex = {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True,
             "reasoning": {"summary": "auto"}, "store": False, "stream": True,
             "include": ["reasoning.encrypted_content"], "prompt_cache_key": "thread-1",
             "client_metadata": {"session_id": "thread-1", "thread_id": "thread-1",
                                 "x-codex-ws-stream-request-start-ms": "1796082263000"}}

    def message(role: str, text: str) -> dict:
        return {"type": "message", "role": role,
                "content": [{"type": "input_text", "text": text}]}

    with connect(ws_url(server)) as ws:
        create(ws, **codex, input=[message("developer", "Be brief.")], generate=False)
        prewarm = until_end(ws)[-1]["response"]
        assert prewarm["status"] == "completed" and prewarm["output"] == []
        first = answer(ws, **codex, input=[message("user", "Reply with: amber falcon")],
                       previous_response_id=prewarm["id"])
        ws.send(json.dumps({"type": "response.processed", "response_id": first["id"]}))
        second = answer(ws, **codex, input=[message("user", RECALL)],
                        previous_response_id=first["id"])
    assert output_text(first) == output_text(second) == "amber falcon"


def error_of(ws: ClientConnection) -> dict:
    frame = json.loads(ws.recv(timeout=60))
    assert frame["type"] == "error", frame
    return frame


@pytest.mark.parametrize("refused", [
    {"tool_choice": {"type": "function", "name": "undeclared"}},
    {"max_output_tokens": 0},
    {"background": True},
    {"stream_id": "no spaces"},
])
def test_a_refused_continuation_evicts_what_it_continued(server, refused):
    """Open Responses: a continuation refused with an error frame evicts the store: false
    response it continued; continuing that id again on the socket is not found."""
    with connect(ws_url(server)) as ws:
        first = answer(ws, input="Reply with: amber falcon", store=False)
        create(ws, input="Reply with: silver", previous_response_id=first["id"], store=False,
               **refused)
        assert error_of(ws)["status"] == 400
        create(ws, input=RECALL, previous_response_id=first["id"], store=False)
        gone = error_of(ws)
        assert (gone["status"], gone["error"]["code"], gone["error"]["param"]) == (
            400, "previous_response_not_found", "previous_response_id")
        assert output_text(answer(ws, input="Reply with: ok", store=False)) == "ok"


def test_a_refused_continuation_of_a_warm_up_evicts_it(server):
    """A warm-up is evicted like any local response when a continuation of it fails."""
    with connect(ws_url(server)) as ws:
        create(ws, input="Reply with: amber falcon", generate=False)
        warm = until_end(ws)[-1]["response"]
        create(ws, input=[], previous_response_id=warm["id"], max_output_tokens=0)
        error_of(ws)
        create(ws, input=[], previous_response_id=warm["id"])
        assert error_of(ws)["error"]["code"] == "previous_response_not_found"


def test_a_refused_continuation_leaves_other_local_responses_and_stored_ones(server):
    """Only the response a failed turn continued is evicted; a stored response stays
    continuable from the store after a failed continuation of it."""
    with connect(ws_url(server)) as ws:
        kept = answer(ws, input="Reply with: zebra", store=False)
        first = answer(ws, input="Reply with: amber falcon", store=False)
        stored = answer(ws, input="Reply with: amber falcon")
        for continued in (first, stored):
            create(ws, input="x", previous_response_id=continued["id"], max_output_tokens=0)
            error_of(ws)
        assert output_text(answer(ws, input=RECALL, previous_response_id=kept["id"],
                                  store=False)) == "zebra"
        assert output_text(answer(ws, input=RECALL, previous_response_id=stored["id"],
                                  store=False)) == "amber falcon"


def test_error_frames_always_carry_a_code(server):
    """Open Responses: a WebSocket error has `error.code`; one without a code of its own
    (a 400 for a bad value) carries its type."""
    with connect(ws_url(server)) as ws:
        create(ws, input="hi", temperature="hot")
        assert error_of(ws)["error"]["code"] == "invalid_request_error"


def test_steer_is_answered_steer_failed_and_the_socket_goes_on(server, client):
    """`response.steer` (openai's `conn.response.steer`) gets an SDK-typed
    `response.steer.failed` (steering_not_supported) returning its input; the socket goes on."""
    steer_input = [{"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "shorter"}]}]
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Reply with: amber", store=False)
        first = next(e for e in conn if e.type in TERMINAL).response
        conn.response.steer(input=steer_input, previous_response_id=first.id)
        failed = conn.recv()
        assert failed.type == "response.steer.failed"
        assert failed.error.code == "steering_not_supported"
        assert failed.error.type == "invalid_request_error"
        assert failed.steer.previous_response_id == first.id
        assert failed.steer.input[0].content[0].text == "shorter" and failed.steer.id is None
        assert failed.stream_id is None
        conn.response.create(model=MODEL, input=RECALL, previous_response_id=first.id,
                             store=False)
        assert next(e for e in conn if e.type in TERMINAL).response.output_text == "amber"


def test_steering_a_response_streaming_on_a_lane_answers_on_its_lane(server):
    """A steer naming the response a named lane is streaming is answered with that lane's
    stream_id, and does not disturb the response."""
    with connect(ws_url(server)) as ws:
        create(ws, **{k: v for k, v in HOLD.items() if k != "model"}, stream_id="left")
        response_id = json.loads(ws.recv(timeout=60))["response"]["id"]
        ws.send(json.dumps({"type": "response.steer", "previous_response_id": response_id,
                            "input": "stop"}))
        while (frame := json.loads(ws.recv(timeout=60)))["type"] != "response.steer.failed":
            assert frame["type"] != "error", frame
        assert frame["stream_id"] == "left" and frame["steer"]["input"] == "stop"
        server.http.post(f"/v1/responses/{response_id}/cancel")
        assert until_end(ws)[-1]["error"]["code"] == "response_cancelled"


@pytest.mark.parametrize("steer, param", [
    ({}, "previous_response_id"),
    ({"previous_response_id": 7, "input": "x"}, "previous_response_id"),
    ({"previous_response_id": "resp_a"}, "input"),
    ({"previous_response_id": "resp_a", "input": []}, "input"),
    ({"previous_response_id": "resp_a", "input": ["x"]}, "input"),
    ({"previous_response_id": "resp_a", "input": "x", "stream_id": "left"}, "stream_id"),
])
def test_malformed_steer_is_an_error_frame(server, steer, param):
    """A steer frame that is not openai's `ResponseSteerEvent` is a 400 error frame naming
    the field; the socket stays usable."""
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "response.steer", **steer}))
        error = error_of(ws)
        assert (error["status"], error["error"]["param"]) == (400, param)
        assert output_text(answer(ws, input="Reply with: ok")) == "ok"


def test_prewarm_is_a_warm_up(server):
    """`prompt_cache_options.prewarm: true` overrides `generate` (the SDK's words): a
    warm-up, nothing generated, continuable on the socket."""
    tokens = server.health()["generation"]["tokens"]
    with connect(ws_url(server)) as ws:
        create(ws, input="Reply with: amber falcon", generate=True,
               prompt_cache_options={"prewarm": True})
        frames = until_end(ws)
        assert [f["type"] for f in frames] == [
            "response.created", "response.in_progress", "response.completed"]
        warm = frames[-1]["response"]
        assert warm["output"] == [] and server.health()["generation"]["tokens"] == tokens
        create(ws, input="x", prompt_cache_options={"prewarm": "yes"})
        assert error_of(ws)["error"]["param"] == "prompt_cache_options.prewarm"
        reply = answer(ws, input=[], previous_response_id=warm["id"],
                       prompt_cache_options={"prewarm": False})
    assert output_text(reply) == "amber falcon"


def test_api_key_refuses_the_upgrade():
    """With --api-key, an upgrade without the right Bearer key is refused with a 401."""
    with run_server("--api-key", "sekrit") as srv:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            with pytest.raises(InvalidStatus) as refused:
                connect(ws_url(srv), additional_headers=headers)
            assert refused.value.response.status_code == 401
            assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
        with connect(ws_url(srv), additional_headers={"Authorization": "Bearer sekrit"}) as ws:
            assert output_text(answer(ws, input="Reply with: ok")) == "ok"
        with srv.client(api_key="sekrit").responses.connect() as conn:
            conn.response.create(model=MODEL, input="Reply with: ok")
            assert next(e for e in conn if e.type in TERMINAL).response.output_text == "ok"
