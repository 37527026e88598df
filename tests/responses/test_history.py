"""The earlier turns a request continues: a `previous_response_id` chain walked through the
store (a dict here), oldest first, and what cannot be continued refused by name. Records are
the stores' typed records (`StoredResponse.of`), as the keeper makes them."""

from __future__ import annotations

from typing import Any

import pytest

from triode.errors import InvalidRequest
from triode.model.request import Sampling
from triode.responses import history, translate, wire
from triode.responses.builder import ResponseBuilder
from triode.responses.convert import structure
from triode.responses.lifecycle import Status
from triode.responses.objects import items_of, plain, response_of, usage
from triode.storage.records import StoredResponse


def message(role: str, text: str, n: int) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"id": f"msg_{n}", "type": "message", "role": role, "status": "completed",
            "content": [{"type": kind, "text": text}]}


def response(rid: str, previous: str | None, reply: str, n: int,
             status: str = "completed") -> dict[str, Any]:
    """A response object as a supervisor builds one: its instructions, then `reply`."""
    body = {"model": "m", "input": "hi", "instructions": f"be {rid}",
            "previous_response_id": previous}
    builder = ResponseBuilder(rid, translate.plan(structure(body, wire.CreateResponse),
                                                  Sampling()).echo)
    builder.created()
    if status != "queued":
        builder.enter(Status.IN_PROGRESS)
        builder.text(reply)
    if status == "completed":
        builder.enter(Status.COMPLETED, usage(1, 1))
    obj: dict[str, Any] = plain(builder.obj)
    return obj


def record(obj: dict[str, Any], items: list[dict[str, Any]], *, ephemeral: bool = False
           ) -> StoredResponse:
    return StoredResponse.of(response_of(obj), items_of(items), ephemeral=ephemeral)


class Store:
    """What `chain` reads: records by id."""

    def __init__(self, **records: StoredResponse) -> None:
        self.records = records

    async def get(self, response_id: str) -> StoredResponse | None:
        return self.records.get(response_id)


def texts(items) -> list[str]:
    return [item["content"][0]["text"] for item in plain(items)]


STORE = Store(
    resp_1=record(response("resp_1", None, "a1", 2), [message("user", "q1", 1)]),
    resp_2=record(response("resp_2", "resp_1", "a2", 4), [message("user", "q2", 3)]),
    resp_3=record(response("resp_3", "resp_2", "a3", 6), [message("user", "q3", 5)]))


async def test_a_chain_is_every_earlier_input_and_output_oldest_first():
    """Each ancestor's input then output, from the oldest to the named response; the
    instructions are the response object's, never items of the chain."""
    assert texts(await history.chain(STORE, "resp_3")) == ["q1", "a1", "q2", "a2", "q3", "a3"]
    assert texts(await history.chain(STORE, "resp_1")) == ["q1", "a1"]


async def test_an_unknown_id_is_refused_but_an_expired_ancestor_starts_the_chain_later():
    """The named response must exist (400 previous_response_not_found); an older one the
    store no longer has ends the walk there."""
    with pytest.raises(InvalidRequest) as refused:
        await history.chain(STORE, "resp_missing")
    assert (refused.value.param, refused.value.code) == ("previous_response_id",
                                                         "previous_response_not_found")
    expired = Store(resp_2=STORE.records["resp_2"], resp_3=STORE.records["resp_3"])
    assert texts(await history.chain(expired, "resp_3")) == ["q2", "a2", "q3", "a3"]


@pytest.mark.parametrize("status, ephemeral, says", [
    ("in_progress", False, "has not finished"), ("queued", False, "has not finished"),
    ("completed", True, "store: false")])
async def test_a_running_or_ephemeral_response_cannot_be_continued(status, ephemeral, says):
    """Only a finished, stored response continues; an ephemeral one (background with
    store: false) can be polled, not continued."""
    store = Store(resp_1=record(response("resp_1", None, "a", 2, status),
                                        [message("user", "q", 1)], ephemeral=ephemeral))
    with pytest.raises(InvalidRequest) as refused:
        await history.chain(store, "resp_1")
    assert refused.value.param == "previous_response_id"
    assert says in refused.value.message


def test_a_conversation_is_named_by_its_id_or_an_object_with_one():
    """`conversation`: "conv_1" or {"id": "conv_1"}; anything else is a 400 naming it."""
    assert history.conversation_id("conv_1") == "conv_1"
    assert history.conversation_id({"id": "conv_1"}) == "conv_1"
    for bad in ("", {}, {"id": 7}):
        with pytest.raises(InvalidRequest) as refused:
            history.conversation_id(bad)
        assert refused.value.param == "conversation"


def test_a_response_too_large_to_keep_is_kept_as_failed_without_output():
    """The byte budget cannot hold the finished object: what is kept instead is the object
    `failed` with a server_error saying why and no output, and its events created then
    response.failed."""
    req = structure({"model": "m", "input": "hi"}, wire.CreateResponse)
    builder = ResponseBuilder("resp_big", translate.plan(req, Sampling()).echo)
    builder.created()
    builder.enter(Status.IN_PROGRESS)
    builder.text("a very long answer")
    builder.enter(Status.COMPLETED, usage(3, 4))
    kept, events = history.too_large(builder.obj, builder.events[0])
    failed = plain(events[-1])["response"]
    assert plain(kept) == failed
    assert [plain(e)["type"] for e in events] == ["response.created", "response.failed"]
    assert (failed["status"], failed["output"], failed["error"]["code"]) == (
        "failed", [], "server_error")
    assert "--responses-store-max-bytes" in failed["error"]["message"]
    assert plain(builder.obj)["status"] == "completed"   # the live object is not changed
