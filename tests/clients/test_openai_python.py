"""The openai Python SDK (the test extra's `openai`) against triode: every `responses.*` and
`conversations.*` method, through the SDK's own parsing."""

from __future__ import annotations

import time

import openai
import pydantic
import pytest

MODEL = "triode-tiny"
# A background job that holds its slot for seconds: the schema demands a 2,000-character
# string, which constrained decoding cannot end early (tests/e2e/test_spine.py's HOLD).
HOLD = {"format": {"type": "json_schema", "name": "hold", "strict": True, "schema": {
    "type": "object", "properties": {"a": {"type": "string", "minLength": 2000}},
    "required": ["a"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def client(triode):
    return triode.client()


def test_create_and_retrieve(client):
    """responses.create (plain and stream=True), then retrieve of the stored object."""
    created = client.responses.create(model=MODEL, input="Reply with: silver 411 lake")
    assert created.status == "completed" and created.output_text == "silver 411 lake"
    events = list(client.responses.create(model=MODEL, input="Reply with: green fox",
                                          stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        "green fox"
    retrieved = client.responses.retrieve(created.id)
    assert retrieved.id == created.id and retrieved.output_text == "silver 411 lake"
    assert retrieved.usage.input_tokens == created.usage.input_tokens


def test_stream_helper(client):
    """responses.stream: typed events while generating, then get_final_response()."""
    with client.responses.stream(model=MODEL, input="Reply with: amber 77 kite") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "amber 77 kite" and len(deltas) > 1
    assert final.status == "completed" and final.output_text == "amber 77 kite"


def test_retrieve_stream_replay(client):
    """retrieve(stream=True) replays stored events; starting_after resumes after N."""
    created = client.responses.create(model=MODEL, input="Reply with: plum 9 reed")
    replay = list(client.responses.retrieve(created.id, stream=True))
    assert [e.sequence_number for e in replay] == list(range(len(replay)))
    assert replay[0].type == "response.created" and replay[-1].type == "response.completed"
    assert replay[-1].response.output_text == "plum 9 reed"
    after = list(client.responses.retrieve(created.id, stream=True, starting_after=2))
    assert [e.sequence_number for e in after] == list(range(3, len(replay)))


def test_delete(client):
    """responses.delete removes a stored response: retrieve is then a 404."""
    created = client.responses.create(model=MODEL, input="Reply with: red 3 oak")
    assert client.responses.delete(created.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_cancel_background(client):
    """responses.cancel stops a running background job; stream(response_id=) follows one."""
    job = client.responses.create(model=MODEL, input="Reply with: a", background=True,
                                  max_output_tokens=4000, text=HOLD)
    assert job.status == "queued" and job.background is True
    deadline = time.monotonic() + 30
    while (polled := client.responses.retrieve(job.id)).status == "queued":
        assert time.monotonic() < deadline, polled
        time.sleep(0.02)
    assert polled.status == "in_progress"
    assert client.responses.cancel(job.id).status == "cancelled"
    assert client.responses.retrieve(job.id).status == "cancelled"

    other = client.responses.create(model=MODEL, input="Reply with: blue 5 fern",
                                    background=True)
    with client.responses.stream(response_id=other.id) as stream:
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "blue 5 fern"


def test_compact(client):
    """responses.compact: kept items + one compaction item, which create takes back as input."""
    words = "amber kite plum reed fox fern oak moss lark dune vale cove".split()
    history: list[dict] = []
    for i, word in enumerate(words):
        history += [{"role": "user", "content": f"Reply with: {word} {i} {word}"},
                    {"role": "assistant", "content": f"{word} {i} {word}"}]
    history.append({"role": "user", "content": "Reply with: last one"})
    compacted = client.responses.compact(model=MODEL, input=history)
    assert compacted.object == "response.compaction"
    types = [item.type for item in compacted.output]
    assert types[-1] == "compaction" and types.count("compaction") == 1
    assert len(compacted.output) < len(history)
    assert compacted.usage.input_tokens > 0
    follow = client.responses.create(
        model=MODEL, input=[item.model_dump(exclude_none=True, warnings=False)
                            for item in compacted.output]
        + [{"role": "user", "content": "Reply with: blue 5 fern"}])
    assert follow.output_text == "blue 5 fern"


def test_input_items_and_input_tokens(client):
    """responses.input_items.list a page at a time, and responses.input_tokens.count."""
    first = client.responses.create(model=MODEL, input="Reply with: amber 77 kite")
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id,
        input=[{"role": "user", "content": "Repeat your first answer."},
               {"role": "user", "content": "Reply with: green fox"}])
    page = client.responses.input_items.list(second.id, limit=1, order="asc")
    assert len(page.data) == 1 and page.has_more
    texts = [item.content[0].text for item in page]          # auto-pagination
    assert texts == ["Repeat your first answer.", "Reply with: green fox"]
    counted = client.responses.input_tokens.count(model=MODEL, input="Reply with: amber 77 kite")
    assert counted.input_tokens == first.usage.input_tokens


def test_parse(client):
    """responses.parse returns the schema's JSON, parsed by the SDK."""
    class City(pydantic.BaseModel):
        city: str

    parsed = client.responses.parse(model=MODEL, text_format=City,
                                    input="Answer in JSON with key city and value Paris")
    assert parsed.output_parsed == City(city="Paris")


def test_connect_websocket(client):
    """responses.connect(): two creates on one WebSocket, chained by previous_response_id."""
    with client.responses.connect() as connection:
        connection.response.create(model=MODEL, input="Reply with: amber 77 kite")
        first = next(e for e in connection if e.type == "response.completed").response
        connection.response.create(model=MODEL, input="Repeat your first answer.",
                                   previous_response_id=first.id)
        second = next(e for e in connection if e.type == "response.completed").response
    assert first.output_text == "amber 77 kite" and second.output_text == "amber 77 kite"


def test_conversations(client):
    """Every conversations.* and conversations.items.* method, with a response in between."""
    conv = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Reply with: amber 77 kite"}],
        metadata={"topic": "python"})
    assert conv.object == "conversation" and conv.metadata == {"topic": "python"}
    assert client.conversations.retrieve(conv.id).id == conv.id
    assert client.conversations.update(conv.id, metadata={"topic": "sdk"}).metadata == \
        {"topic": "sdk"}

    added = client.conversations.items.create(
        conv.id, items=[{"role": "assistant", "content": "amber 77 kite"},
                        {"role": "user", "content": "Repeat your first answer."}])
    assert [item.type for item in added.data] == ["message", "message"]
    assert added.has_more is False and added.last_id == added.data[-1].id

    answered = client.responses.create(model=MODEL, conversation=conv.id, input=[])
    assert answered.output_text == "amber 77 kite" and answered.conversation.id == conv.id

    listed = list(client.conversations.items.list(conv.id, order="asc", limit=1))
    assert [(item.role, item.content[0].text) for item in listed] == [
        ("user", "Reply with: amber 77 kite"), ("assistant", "amber 77 kite"),
        ("user", "Repeat your first answer."), ("assistant", "amber 77 kite")]
    newest = client.conversations.items.list(conv.id)          # default order: desc
    assert newest.data[0].id == listed[-1].id

    item = client.conversations.items.retrieve(listed[0].id, conversation_id=conv.id)
    assert item.id == listed[0].id and item.content[0].text == "Reply with: amber 77 kite"
    after = client.conversations.items.delete(listed[0].id, conversation_id=conv.id)
    assert after.object == "conversation" and after.id == conv.id
    assert [i.id for i in client.conversations.items.list(conv.id, order="asc")] == \
        [i.id for i in listed[1:]]

    deleted = client.conversations.delete(conv.id)
    assert deleted.deleted is True and deleted.object == "conversation.deleted"
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)
