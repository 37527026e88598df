"""The stored records: a StoredResponse keeps exactly the bytes every existing store holds
and reads them back typed."""

from __future__ import annotations

import json

import attrs

from triode.model.request import Sampling
from triode.responses import translate, wire
from triode.responses.builder import ResponseBuilder
from triode.responses.convert import structure
from triode.responses.lifecycle import Status
from triode.responses.objects import item_of, plain
from triode.storage.records import ConversationRecord, StoredResponse, encode_json


def finished_response():
    """A background response as a supervisor builds one: created, in progress, text."""
    req = structure({"model": "m", "input": "hi", "metadata": {"a": "b"},
                     "tools": [{"type": "function", "name": "f"}]}, wire.CreateResponse)
    builder = ResponseBuilder("resp_1", translate.plan(req, Sampling()).echo, background=True)
    builder.created()
    builder.enter(Status.IN_PROGRESS)
    return builder.obj, builder.events


USER = item_of({"type": "message", "id": "msg_in", "role": "user",
                "content": [{"type": "input_text", "text": "hi"}]})


def test_the_record_keeps_the_format_of_existing_stores():
    """The body is the JSON {"response", "input"} (+ "ephemeral": true) and the event log
    the JSON array of the events: what an existing SQLite file or Redis store holds."""
    obj, events = finished_response()
    kept = StoredResponse.of(obj, [USER], events, ephemeral=True)
    assert json.loads(kept.body) == {"response": plain(obj), "input": [plain(USER)],
                                     "ephemeral": True}
    assert kept.event_log == encode_json(events)
    assert "ephemeral" not in json.loads(StoredResponse.of(obj, [USER]).body)
    assert kept.size == len(kept.body) + len(kept.event_log)


def test_typed_reads_decode_what_was_kept():
    """Read back from its bytes, the record answers with typed objects equal to those put."""
    obj, events = finished_response()
    kept = StoredResponse(StoredResponse.of(obj, [USER], events).body,
                          StoredResponse.of(obj, [USER], events).event_log)
    assert kept.response == obj
    assert kept.input == [USER]
    assert not kept.ephemeral
    assert kept.events() == events    # typed again, equal to those put
    assert kept.item_ids() == ("msg_in",)
    assert kept.find_item("msg_in") == USER and kept.find_item("msg_x") is None


def test_another_object_or_events_keep_the_rest():
    """with_response / with_events replace one part; the input, the ephemeral flag and the
    other part stay."""
    obj, events = finished_response()
    kept = StoredResponse.of(obj, [USER], events, ephemeral=True)
    failed = attrs.evolve(obj, status=Status.FAILED)
    replaced = kept.with_response(failed).with_events(events[:1])
    assert replaced.response == failed
    assert replaced.input == [USER] and replaced.ephemeral
    assert replaced.events() == events[:1]


def test_a_conversation_record_is_its_object_then_its_items():
    """A conversation's values decode as its object, then its items."""
    values = (encode_json({"id": "conv_1"}), encode_json(USER))
    assert ConversationRecord.decode(values) == ConversationRecord({"id": "conv_1"},
                                                                   [USER])
