"""Compaction, context_management and input_tokens end to end, on the bundled model with a
512-token context window so that compaction triggers within a few turns."""

from __future__ import annotations

import json
import uuid

import pytest

from triode.responses.compaction import SUMMARY_PREFIX, compaction_item, decode
from triode.responses.objects import plain
from training.tiny.data import TRAIN_WORDS

from ..conftest import run_server
from .test_background import create, finish, text_of
from .test_spine import MODEL, error_of, sse_events

CONTEXT = 512
RECALL = "Repeat your first answer."


@pytest.fixture(scope="module")
def small():
    with run_server("--context-length", str(CONTEXT)) as s:
        yield s


def managed(threshold: int) -> list[dict]:
    return [{"type": "compaction", "compact_threshold": threshold}]


def pair(word: str) -> list[dict]:
    return [{"role": "user", "content": f"Reply with: {word}"},
            {"role": "assistant", "content": word}]


def history(n: int) -> list[dict]:
    return [item for i in range(n) for item in pair(f"{TRAIN_WORDS[i]} {TRAIN_WORDS[i + 60]}")]


WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def test_input_tokens_equals_the_usage_of_the_same_request(small):
    client = small.client()
    first = client.responses.create(model=MODEL, input="Reply with: amber falcon")
    conversation = f"conv_{uuid.uuid4().hex}"
    client.responses.create(model=MODEL, input="Reply with: copper", conversation=conversation)
    blob = plain(compaction_item("earlier turns", pair("silver lake")))
    bodies = [
        {"input": "Reply with: hello"},
        {"input": "Reply with: hello", "instructions": "Be brief.", "tools": [WEATHER]},
        {"input": RECALL, "previous_response_id": first.id},
        {"input": RECALL, "conversation": conversation},
        {"input": [*pair("copper"), blob, {"role": "user", "content": RECALL}]},
    ]
    for body in bodies:
        counted = client.responses.input_tokens.count(model=MODEL, **body)
        assert counted.object == "response.input_tokens"
        used = client.responses.create(model=MODEL, **body).usage.input_tokens
        assert counted.input_tokens == used, body
    # model may be left out (the loaded one); the create validation errors apply.
    r = small.http.post("/v1/responses/input_tokens", json={"input": "hi"})
    assert r.status_code == 200 and r.json()["input_tokens"] > 0
    for body, param in (({"model": "nope", "input": "x"}, "model"),
                        ({"model": MODEL, "input": 5}, "input"),
                        ({"model": MODEL, "input": "x", "previous_response_id": "resp_x"},
                         "previous_response_id"),
                        ({"model": MODEL, "input": [{"type": "compaction",
                                                     "encrypted_content": "%%"}]},
                         "input[0].encrypted_content")):
        r = small.http.post("/v1/responses/input_tokens", json=body)
        assert r.status_code == 400 and error_of(r)["param"] == param, r.text


def test_compaction_item_stands_in_for_earlier_turns_also_through_a_chain(small):
    """The replayed summary and kept items replace what precedes the compaction item: the
    first answer the model sees afterwards is the kept one, not the dropped one."""
    from transformers import AutoTokenizer

    from triode.model.loading import BUNDLED_PATH

    client = small.client()
    item = plain(compaction_item("earlier turns", pair("amber falcon")))
    direct = client.responses.create(model=MODEL, input=[
        *pair("copper"), item, {"role": "user", "content": RECALL}])
    assert direct.output_text == "amber falcon"
    first = client.responses.create(model=MODEL, input=[
        *pair("copper"), item, {"role": "user", "content": "Reply with: silver"}])
    assert first.output_text == "silver"
    chained = client.responses.create(model=MODEL, input=RECALL, previous_response_id=first.id)
    assert chained.output_text == "amber falcon"
    tok = AutoTokenizer.from_pretrained(str(BUNDLED_PATH))
    text = tok.apply_chat_template(
        [{"role": "system", "content": SUMMARY_PREFIX + "earlier turns"}, *pair("amber falcon"),
         *pair("silver"), {"role": "user", "content": RECALL}],
        add_generation_prompt=True, tokenize=False)
    assert chained.usage.input_tokens == len(tok.encode(text, add_special_tokens=False))


def test_compact_keeps_the_last_user_message_and_whole_tool_groups(small):
    items = [
        {"role": "system", "content": "You are terse."},
        *pair("amber"),
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "rain, 8 C"},
        {"role": "assistant", "content": "Rain, 8 C."},
        *pair("copper kettle"),
        {"role": "user", "content": "And in Rome?"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c2", "output": "sun, 21 C"},
    ]
    seen = set()
    stores = small.health()["stores"]
    for keep in (1, 10, 30, 60, 90, 200):
        r = small.http.post("/v1/responses/compact", json={
            "model": MODEL, "input": items, "tools": [WEATHER], "keep_tokens": keep,
            "max_output_tokens": 32})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "response.compaction" and body["model"] == MODEL
        assert body["usage"]["output_tokens"] >= 1 and body["usage"]["input_tokens"] > 0
        out = body["output"]
        assert out[0]["role"] == "system" and out[-1]["type"] == "compaction"
        assert sum(o["type"] == "compaction" for o in out) == 1
        kept = out[1:-1]
        summary, blob_items = decode(out[-1]["encrypted_content"], "x")
        assert blob_items == kept
        texts = [json.dumps(k.get("content")) for k in kept]
        assert any("And in Rome?" in t for t in texts), "the last user message is kept"
        calls = {k["call_id"] for k in kept if k["type"] == "function_call"}
        outputs = {k["call_id"] for k in kept if k["type"] == "function_call_output"}
        assert calls == outputs
        seen.add(len(kept))
    assert len(seen) >= 2, "keep_tokens changes how much is kept"
    after = small.health()["stores"]
    assert [after[s]["entries"] for s in stores] == [stores[s]["entries"] for s in stores], \
        "compact stores nothing"
    # The compacted output, sent back with a new message, is a valid, shorter input.
    r = small.http.post("/v1/responses/compact", json={"model": MODEL, "input": items,
                                                       "tools": [WEATHER], "keep_tokens": 60})
    follow = [*r.json()["output"], {"role": "user", "content": "Reply with: done"}]
    client = small.client()
    shorter = client.responses.input_tokens.count(model=MODEL, input=follow, tools=[WEATHER])
    full = client.responses.input_tokens.count(
        model=MODEL, input=[*items, {"role": "user", "content": "Reply with: done"}],
        tools=[WEATHER])
    assert shorter.input_tokens < full.input_tokens


def test_compact_accepts_a_previous_response_id_chain(small):
    """/compact with previous_response_id compacts the chain's history plus `input` (OpenAI's
    API; the seed refuses it): the result equals compacting the same history sent whole, and
    an unknown or unfinished chain is refused like a create's."""
    client = small.client()
    whole: list[dict] = []   # the same history, as a client would send it whole
    previous = None
    for user in history(4)[::2]:
        resp = client.responses.create(model=MODEL, input=user["content"],
                                       previous_response_id=previous)
        previous = resp.id
        whole += [user, {"role": "assistant", "content": resp.output_text}]
    chained = client.responses.input_items.list(previous)  # the newest turn's input only
    assert len(chained.data) == 1
    body = {"model": MODEL, "keep_tokens": 30, "max_output_tokens": 16}
    by_chain = small.http.post("/v1/responses/compact", json={
        **body, "previous_response_id": previous, "input": "Reply with: done"})
    assert by_chain.status_code == 200, by_chain.text
    out = by_chain.json()["output"]
    assert out[-1]["type"] == "compaction"
    _, kept = decode(out[-1]["encrypted_content"], "x")
    assert kept == out[:-1] and kept[-1]["content"][0]["text"] == "Reply with: done"
    whole.append({"role": "user", "content": "Reply with: done"})
    by_whole = small.http.post("/v1/responses/compact", json={**body, "input": whole})
    assert by_whole.status_code == 200, by_whole.text

    def shape(output):
        return [(o["type"], o.get("role"), [p.get("text") for p in o.get("content", [])])
                for o in output[:-1]]

    assert shape(out) == shape(by_whole.json()["output"]), "the chain is the history compacted"
    assert by_chain.json()["usage"]["input_tokens"] == by_whole.json()["usage"]["input_tokens"]
    alone = small.http.post("/v1/responses/compact", json={**body, "input": "Reply with: done"})
    assert alone.status_code == 200, alone.text   # without the chain: nothing to drop
    summary, kept = decode(alone.json()["output"][-1]["encrypted_content"], "x")
    assert summary == "" and [i["content"][0]["text"] for i in kept] == ["Reply with: done"]
    r = small.http.post("/v1/responses/compact", json={
        **body, "previous_response_id": "resp_nope", "input": "x"})
    assert r.status_code == 400 and error_of(r)["param"] == "previous_response_id"


@pytest.mark.parametrize("extra,param", [
    ({"stream": True}, "stream"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"keep_tokens": 0}, "keep_tokens"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": 16385}, "max_output_tokens"),
    ({"keep_tokens": "many"}, "keep_tokens"),
])
def test_compact_refusals(small, extra, param):
    r = small.http.post("/v1/responses/compact",
                        json={"model": MODEL, "input": history(3), **extra})
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param


def test_compact_context_length_exceeded_cases(small):
    """A history longer than one window is a 400 context_length_exceeded."""
    r = small.http.post("/v1/responses/compact",
                        json={"model": MODEL, "input": history(40), "keep_tokens": 100})
    assert r.status_code == 400, r.text
    assert error_of(r)["code"] == "context_length_exceeded"


@pytest.mark.parametrize("items,keep", [
    ([{"role": "user", "content": "Reply with: alone"}], 100),      # nothing to drop
    ([*pair("a"), {"role": "user", "content": "Reply with: b"}], 1),  # no shorter summarized
    (pair("silver lake"), None),                                    # Open Responses' case
])
def test_compact_of_a_history_too_short_to_shrink_keeps_it_whole(small, items, keep):
    """As OpenAI answers (a superset of the seed's 400: docs/conformance.md): 200, the
    history's items kept, then one compaction item with an empty summary that stands in for
    nothing; sent back with a new message, it renders the same history again."""
    body = {"model": MODEL, "input": items, **({"keep_tokens": keep} if keep else {})}
    r = small.http.post("/v1/responses/compact", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["object"] == "response.compaction" and answer["usage"]["output_tokens"] == 0
    output = answer["output"]
    assert [i["type"] for i in output].count("compaction") == 1
    assert output[-1]["type"] == "compaction"
    summary, kept = decode(output[-1]["encrypted_content"], "x")
    assert summary == "" and [i["role"] for i in kept] == [i["role"] for i in items]
    assert [i["role"] for i in output[:-1]] == [i["role"] for i in items]
    follow = [*output, {"role": "user", "content": "Reply with: next"}]
    direct = [*items, {"role": "user", "content": "Reply with: next"}]
    counted = [small.http.post("/v1/responses/input_tokens",
                               json={"model": MODEL, "input": x}).json()["input_tokens"]
               for x in (follow, direct)]
    assert counted[0] == counted[1]


def test_a_trailing_compaction_trigger_answers_with_exactly_one_compaction_item(small):
    """Codex's compaction: the history before a trailing compaction_trigger becomes the
    response's only output item, a compaction; the trigger is neither stored nor listed,
    and the chain continues from the compaction."""
    client = small.client()
    for items in (history(6), pair("amber falcon")):   # one to shrink, one too short
        done = client.responses.create(model=MODEL,
                                       input=[*items, {"type": "compaction_trigger"}])
        assert done.status == "completed"
        assert [item.type for item in done.output] == ["compaction"]
        listed = small.http.get(f"/v1/responses/{done.id}/input_items",
                                params={"order": "asc", "limit": 100}).json()["data"]
        assert [i["type"] for i in listed] == ["message"] * len(items)
        after = client.responses.create(model=MODEL, previous_response_id=done.id,
                                        input="Reply with: next")
        assert after.status == "completed" and after.output_text == "next"
    streamed = sse_events(small.http.post("/v1/responses", json={
        "model": MODEL, "stream": True,
        "input": [*history(6), {"type": "compaction_trigger"}]}).text)
    added = [e["item"]["type"] for e in streamed if e["type"] == "response.output_item.added"]
    assert added == ["compaction"] and streamed[-1]["type"] == "response.completed"


def test_a_compaction_trigger_that_is_not_last_is_a_400_naming_it(small):
    r = small.http.post("/v1/responses", json={
        "model": MODEL, "input": [{"type": "compaction_trigger"}, *pair("a")]})
    assert r.status_code == 400 and error_of(r)["param"] == "input[0]"
    r = small.http.post("/v1/responses/compact", json={
        "model": MODEL, "input": [*pair("a"), {"type": "compaction_trigger"}]})
    assert r.status_code == 400 and error_of(r)["param"] == "input[2]"


def test_thirty_turn_loop_with_context_management_stays_under_the_window(small):
    """Each turn's input is compacted exactly when it reaches the threshold (input_tokens
    says so beforehand), usage stays under the window, and every answer is right."""
    client = small.client()
    threshold = 200
    previous = None
    compactions = 0
    for turn in range(30):
        word = f"{TRAIN_WORDS[turn]} {TRAIN_WORDS[turn + 70]}"
        body = {"input": f"Reply with: {word}",
                **({"previous_response_id": previous} if previous else {})}
        before = client.responses.input_tokens.count(model=MODEL, **body).input_tokens
        resp = client.responses.create(model=MODEL, context_management=managed(threshold),
                                       **body)
        compacted = resp.output[0].type == "compaction"
        assert compacted == (before >= threshold), (turn, before)
        compactions += compacted
        assert resp.usage.input_tokens < threshold + 40
        assert resp.usage.input_tokens + resp.usage.output_tokens < CONTEXT
        if compacted:
            assert resp.usage.input_tokens < before
        assert resp.output_text == word
        previous = resp.id
    assert compactions >= 3


def test_streamed_compaction_events_come_after_in_progress_and_before_the_item(small):
    body = {"model": MODEL, "stream": True, "input": [*history(6), {
        "role": "user", "content": "Reply with: ember frost"}],
        "context_management": managed(100)}
    events = sse_events(small.http.post("/v1/responses", json=body).text)
    types = [e["type"] for e in events]
    assert types[:6] == ["response.created", "response.in_progress", "mlx.compaction.started",
                         "mlx.compaction.completed", "response.output_item.added",
                         "response.output_item.done"]
    started, completed, added = events[2], events[3], events[4]
    rid = events[0]["response"]["id"]
    assert started["response_id"] == completed["response_id"] == rid
    assert started["input_tokens"] == completed["input_tokens_before"]
    assert completed["input_tokens_after"] < completed["input_tokens_before"]
    assert added["output_index"] == 0 and added["item"]["type"] == "compaction"
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    assert final["usage"]["input_tokens"] == completed["input_tokens_after"]
    assert final["output"][0] == events[5]["item"]
    assert text_of(final) == "ember frost"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_context_management_validation(small):
    for value, param in ((managed(0), "context_management[0].compact_threshold"),
                         (managed(100_000_001), "context_management[0].compact_threshold"),
                         ([{"type": "compaction", "compact_threshold": "x"}],
                          "context_management[0].compact_threshold"),
                         ([{"type": "truncate"}], "context_management[0].type"),
                         ([{"type": "compaction", "compact_threshold": 5, "x": 1}],
                          "context_management[0].x")):
        r = small.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                   "context_management": value})
        assert r.status_code == 400, r.text
        assert error_of(r)["param"] == param
    ok = small.client().responses.create(model=MODEL, input="Reply with: edge",
                                         context_management=managed(100_000_000))
    assert ok.output_text == "edge" and ok.output[0].type == "message"


def test_failed_compaction_is_a_400_that_changes_nothing(small):
    client = small.client()
    conversation = f"conv_{uuid.uuid4().hex}"
    first = client.responses.create(model=MODEL, input="Reply with: amber falcon",
                                    conversation=conversation)
    stats = small.health()["stores"]
    # Threshold 1 with nothing before the last user message: compaction cannot shorten.
    r = small.http.post("/v1/responses", json={
        "model": MODEL, "input": "Reply with: x", "context_management": managed(1)})
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded"
    r = small.http.post("/v1/responses", json={
        "model": MODEL, "input": "Reply with: x", "conversation": conversation,
        "context_management": managed(1), "stream": True})
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded"
    after = small.health()["stores"]
    for store in ("responses", "conversations"):
        assert (after[store]["entries"], after[store]["bytes"]) == \
            (stats[store]["entries"], stats[store]["bytes"])
    again = client.responses.create(model=MODEL, input=RECALL, conversation=conversation)
    assert again.output_text == "amber falcon"
    assert client.responses.retrieve(first.id).output_text == "amber falcon"


def test_background_job_compacts_while_queued_and_fails_instead_of_the_create(small):
    ok = create(small, {"model": MODEL, "background": True, "context_management": managed(100),
                        "input": [*history(6), {"role": "user", "content": "Reply with: dusk"}]})
    assert ok["status"] == "queued"
    done = finish(small, ok["id"])
    assert done["status"] == "completed" and done["output"][0]["type"] == "compaction"
    assert text_of(done) == "dusk"
    bad = create(small, {"model": MODEL, "background": True, "input": "Reply with: x",
                         "context_management": managed(1)})
    failed = finish(small, bad["id"])
    assert failed["status"] == "failed" and failed["output"] == []
    assert failed["error"]["code"] == "invalid_prompt"
    assert "cannot shorten" in failed["error"]["message"]


def test_generation_is_capped_by_the_context_left(small):
    """With context_management, a long answer stops where the window ends: incomplete,
    max_output_tokens, and input + output fill the window exactly."""
    r = small.http.post("/v1/responses", json={
        "model": MODEL, "input": "Reply with: a", "context_management": managed(10_000),
        "text": {"format": {"type": "json_schema", "name": "long", "strict": True, "schema": {
            "type": "object", "properties": {"a": {"type": "string", "minLength": 2000}},
            "required": ["a"], "additionalProperties": False}}}})
    body = r.json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["usage"]["input_tokens"] + body["usage"]["output_tokens"] == CONTEXT


def test_background_job_whose_queue_is_full_when_it_starts_fails_server_overloaded():
    """A job that compacts first reaches the generation queue only after its create
    returned; a full queue then fails the job with `server_overloaded` (the seed's code)."""
    from .test_background import cancel, hold_job

    with run_server("--context-length", str(CONTEXT), "--parallel", "1",
                    "--max-queue", "0") as srv:
        held = create(srv, hold_job())
        job = create(srv, {"model": MODEL, "background": True, "context_management": managed(100),
                           "input": [*history(6), {"role": "user", "content": "Reply with: x"}]})
        assert job["status"] == "queued"
        failed = finish(srv, job["id"])
        assert failed["status"] == "failed" and failed["output"] == []
        assert failed["error"]["code"] == "server_overloaded"
        cancel(srv, held["id"])


def test_truncation_auto_drops_the_oldest_turns_until_the_input_fits(small):
    """truncation: auto (OpenAI's; the seed allows only disabled): an input over the 512-token
    window drops its oldest turns at split points, keeping the system message and the last
    user message, just enough to leave room for output; input_tokens counts the same; with
    truncation disabled the same input is a 400 context_length_exceeded."""
    client = small.client()
    items = [{"role": "system", "content": "You are terse."}, *history(30),
             {"role": "user", "content": "Reply with: done"}]
    full = small.http.post("/v1/responses", json={"model": MODEL, "input": items})
    assert full.status_code == 400 and error_of(full)["code"] == "context_length_exceeded"
    resp = client.responses.create(model=MODEL, input=items, truncation="auto",
                                   max_output_tokens=8)
    assert resp.status == "completed"
    assert resp.truncation == "auto" and resp.output_text == "done"
    assert CONTEXT - 64 < resp.usage.input_tokens < CONTEXT, "just enough dropped"
    counted = client.responses.input_tokens.count(model=MODEL, input=items, truncation="auto")
    assert counted.input_tokens == resp.usage.input_tokens
    alone = [{"role": "user", "content": "Reply with: " + "word " * 600}]
    r = small.http.post("/v1/responses", json={"model": MODEL, "input": alone,
                                                "truncation": "auto"})
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded"
