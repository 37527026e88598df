"""AccessRecord, AccessLog and access_line in process: what the app tells a request's record,
the line written from it, and the figures the middleware keeps (no server: a fake ASGI app)."""

from __future__ import annotations

import logging

from triode.http.access import (CLIENT_CLOSED, SCOPE_KEY, UNMATCHED, AccessLog, AccessRecord,
                                access_line, access_record, record_route)
from triode.model.request import Sampling
from triode.responses import translate, wire
from triode.responses.builder import ResponseBuilder
from triode.responses.convert import structure
from triode.responses.lifecycle import Status
from triode.responses.objects import (CompactedHistory, ResponseEvent, ResponseObject,
                                      TextDeltaEvent, Usage, usage)


def counts(used: Usage | None) -> tuple[int, int, int] | None:
    """A record's tokens: (input, cached, output)."""
    return None if used is None else (used.input_tokens, used.cached_tokens, used.output_tokens)


def a_response(status: str, **counts: int) -> ResponseObject:
    obj = ResponseBuilder("resp_abc123", translate.plan(structure(
        {"model": "m", "input": "hi", "previous_response_id": "resp_older"},
        wire.CreateResponse), Sampling()).echo).obj
    obj.status = Status(status)
    obj.usage = usage(**counts)
    return obj


def test_the_app_tells_the_record_the_response_and_its_usage():
    """The record keeps what the app tells it: a response object's id, and its usage once
    the object is in a terminal status (a queued or running one's is all 0 and is left out;
    a compaction, which has no status, counts); a stream's terminal events count responses
    and add up their tokens, error events count errors, other events nothing."""
    record = AccessRecord()
    record.record_object(a_response("completed", input_tokens=12, output_tokens=5,
                                    cached_tokens=4))
    assert (record.response_id, counts(record.usage)) == ("resp_abc123", (12, 4, 5))

    for status in ("queued", "in_progress"):
        record = AccessRecord()
        record.record_object(a_response(status))
        assert (record.response_id, counts(record.usage)) == ("resp_abc123", None)

    record = AccessRecord()
    record.record_object(CompactedHistory(id="resp_cmp", created_at=0, model="m", output=[],
                                          usage=usage(input_tokens=30, output_tokens=7)))
    assert (record.response_id, counts(record.usage)) == ("resp_cmp", (30, 0, 7))

    record = AccessRecord()
    done = a_response("completed", input_tokens=12, output_tokens=5, cached_tokens=4)
    for event in (ResponseEvent(type="response.created", sequence_number=0,
                                response=a_response("queued")),
                  TextDeltaEvent(type="response.output_text.delta", sequence_number=1,
                                 item_id="msg_1", output_index=0, content_index=0,
                                 delta="hi"),
                  ResponseEvent(type="response.completed", sequence_number=2, response=done),
                  None,   # an error frame (a WebSocket's)
                  ResponseEvent(type="response.incomplete", sequence_number=3,
                                response=a_response("incomplete", input_tokens=3,
                                                    output_tokens=2))):
        if event is None:
            record.record_error()
        else:
            record.record_event(event)
    assert (record.responses, record.errors, counts(record.usage)) == (2, 1, (15, 4, 7))
    assert record.response_id is None   # a stream's id is told by its route, once


def test_a_line_shows_what_the_record_was_told():
    """The line's fields are the record's: an untold record gives a bare line, a told one
    its response and tokens; a WebSocket's shows its responses and errors."""
    scope = {"type": "http", "client": ("127.0.0.1", 5), "method": "POST",
             "raw_path": b"/v1/responses", "query_string": b""}
    assert access_line(scope, AccessRecord(status=200), 0.05) == (
        "127.0.0.1 POST /v1/responses 200 0.050s")
    told = AccessRecord(status=200)
    told.record_response("resp_abc123")
    told.record_usage(usage(14, 2, cached_tokens=0))
    assert access_line(scope, told, 0.05).endswith(
        " 200 0.050s response=resp_abc123 input_tokens=14 cached_tokens=0 output_tokens=2")
    told.record_drafts(1)
    assert access_line(scope, told, 0.05).endswith(" output_tokens=2 accepted_drafts=1")
    socket = AccessRecord(status=101, responses=2, errors=1)
    socket.record_usage(usage(10, 4, cached_tokens=2))
    socket.record_usage(usage(20, 5, cached_tokens=10))
    assert access_line({**scope, "type": "websocket", "raw_path": b"/v1/responses"},
                       socket, 8.19) == (
        "127.0.0.1 GET /v1/responses 101 8.190s websocket responses=2 errors=1 "
        "input_tokens=30 cached_tokens=12 output_tokens=9")

def http_scope(method: str = "POST", path: bytes = b"/v1/responses") -> dict:
    return {"type": "http", "client": ("10.0.0.7", 5), "method": method, "raw_path": path,
            "query_string": b"", "headers": []}


def app_answering(status: int | None, *, route: str | None = None, disconnect: bool = False):
    """A fake ASGI app: it tells its record `route`, reads a disconnect when `disconnect`,
    and answers `status` (nothing at all when None)."""
    seen: list[dict] = []

    async def app(scope, receive, send):
        seen.append(scope)
        if route is not None:
            record_route(scope, route)
        if disconnect:
            await receive()
        if status is not None:
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    return app, seen


async def sent_nowhere(message):
    return None


async def a_disconnect():
    return {"type": "http.disconnect"}


def test_a_line_keeps_the_path_percent_encoded_and_shows_the_query():
    """The path is written as it came (still percent-encoded, a non-ASCII byte escaped), so
    a line never holds a control character; the query follows it."""
    scope = {**http_scope("GET", b"/v1/responses/a%0Ab\xff"), "query_string": b"stream=true"}
    line = access_line(scope, AccessRecord(status=404), 0.001)
    assert line == "10.0.0.7 GET /v1/responses/a%0Ab\\xff?stream=true 404 0.001s"
    assert "\n" not in line


def test_outside_the_middleware_the_app_tells_a_record_nobody_reads():
    """An app driven without AccessLog still finds a record to tell (its scope has none)."""
    record_route({}, "/v1/responses")
    assert isinstance(access_record({}), AccessRecord)
    mine = AccessRecord()
    assert access_record({SCOPE_KEY: mine}) is mine


async def test_requests_are_counted_by_route_template_and_unmatched_ones_together(caplog):
    """The figures count (method, route template, status): two ids of one route are one
    key, a request no route matched is `unmatched`; each writes one line."""
    log = AccessLog(app_answering(200, route="/v1/responses/<response_id>")[0])
    with caplog.at_level(logging.INFO, logger="triode.access"):
        for path in (b"/v1/responses/resp_1", b"/v1/responses/resp_2"):
            await log(http_scope("GET", path), a_disconnect, sent_nowhere)
        log.app = app_answering(404)[0]
        await log(http_scope("GET", b"/nowhere"), a_disconnect, sent_nowhere)
    stats = log.statistics()
    assert stats.requests == {("GET", "/v1/responses/<response_id>", "200"): 2,
                              ("GET", UNMATCHED, "404"): 1}
    assert stats.in_flight == 0
    assert [r.getMessage().split()[2:4] for r in caplog.records] == [
        ["/v1/responses/resp_1", "200"], ["/v1/responses/resp_2", "200"], ["/nowhere", "404"]]


async def test_an_app_that_answers_nothing_is_a_500_or_a_499_if_the_client_left():
    """A request the app sent no answer to counts as hypercorn answers it, 500; if the
    client had gone first, as nginx's 499."""
    log = AccessLog(app_answering(None)[0], enabled=False)
    await log(http_scope(), a_disconnect, sent_nowhere)
    log.app = app_answering(None, disconnect=True)[0]
    await log(http_scope(), a_disconnect, sent_nowhere)
    assert log.statistics().requests == {("POST", UNMATCHED, "500"): 1,
                                         ("POST", UNMATCHED, str(CLIENT_CLOSED)): 1}


async def test_access_log_off_keeps_the_figures_but_writes_no_line(caplog):
    """`enabled=False` silences the line only: the request is still counted."""
    log = AccessLog(app_answering(200)[0], enabled=False)
    with caplog.at_level(logging.INFO, logger="triode.access"):
        await log(http_scope(), a_disconnect, sent_nowhere)
    assert caplog.records == []
    assert sum(log.statistics().requests.values()) == 1
