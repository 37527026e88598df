"""The openai Node SDK (npm `openai`, pinned in package-lock.json) against triode: the scripts
in ts/ call every `responses.*` and `conversations.*` method with `node` and print what came
back as JSON, which these tests check."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

NODE_TIMEOUT = 120.0


def run_script(node_clients, triode, name: str) -> dict:
    env = {**os.environ, "TRIODE_BASE_URL": triode.base_url}
    try:
        done = subprocess.run([node_clients.node, str(node_clients.scripts / name)],
                              cwd=node_clients.scripts.parent, env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=NODE_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"node {name} did not end in {NODE_TIMEOUT:.0f} s:\n"
                             f"{exc.stdout}\n{exc.stderr}") from None
    assert done.returncode == 0, \
        f"node {name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def responses(node_clients, triode) -> dict:
    return run_script(node_clients, triode, "responses.mjs")


@pytest.fixture(scope="module")
def conversations(node_clients, triode) -> dict:
    return run_script(node_clients, triode, "conversations.mjs")


def test_create_and_create_stream(responses):
    """responses.create, plain and with stream: true."""
    assert responses["create"]["status"] == "completed"
    assert responses["create"]["output_text"] == "silver 411 lake"
    assert responses["create_stream"] == {"first": "response.created",
                                          "last": "response.completed", "text": "green fox"}


def test_stream_helper(responses):
    """responses.stream: delta events, then finalResponse()."""
    assert responses["stream"] == {"deltas": "amber 77 kite", "output_text": "amber 77 kite",
                                   "status": "completed"}


def test_retrieve_and_stream_replay(responses):
    """responses.retrieve and its stream replay, whole and from starting_after."""
    assert responses["retrieve"] == {"id": responses["create"]["id"],
                                     "output_text": "silver 411 lake"}
    events = responses["retrieve_stream"]["events"]
    assert [seq for seq, _ in events] == list(range(len(events)))
    assert events[0][1] == "response.created" and events[-1][1] == "response.completed"
    assert responses["retrieve_stream"]["after_2"] == list(range(3, len(events)))


def test_input_items_and_input_tokens(responses):
    """responses.inputItems.list a page at a time, and responses.inputTokens.count."""
    assert responses["input_items"]["items"] == [{"type": "message", "role": "user"}]
    assert responses["input_items"]["chained_text"] == "silver 411 lake"
    assert responses["input_tokens"]["object"] == "response.input_tokens"
    assert responses["input_tokens"]["input_tokens"] > 0


def test_parse(responses):
    """responses.parse returns the schema's JSON, parsed by the SDK."""
    assert responses["parse"]["output_parsed"] == {"city": "Paris"}


def test_cancel_and_background_stream(responses):
    """responses.cancel stops a running background job; stream({response_id}) follows one."""
    assert responses["cancel"] == {"created": "queued", "before": "in_progress",
                                   "cancelled": "cancelled", "after": "cancelled"}
    assert responses["stream_background"] == {"status": "completed",
                                              "output_text": "plum 9 reed"}


def test_compact(responses):
    """responses.compact: kept items + one compaction item, which create takes back as input."""
    compact = responses["compact"]
    assert compact["object"] == "response.compaction"
    assert compact["types"][-1] == "compaction" and compact["types"].count("compaction") == 1
    assert compact["input_tokens"] > 0 and compact["next"] == "blue 5 fern"


def test_delete(responses):
    """responses.delete removes a stored response: retrieve is then a 404."""
    assert responses["delete"] == {"retrieve_after": 404}


def test_conversations_crud(conversations):
    """conversations.create (items + metadata), retrieve, update, delete."""
    conv_id = conversations["create"]["id"]
    assert conv_id.startswith("conv_") and conversations["create"]["object"] == "conversation"
    assert conversations["create"]["metadata"] == {"topic": "ts"}
    assert conversations["retrieve"] == {"id": conv_id, "metadata": {"topic": "ts"}}
    assert conversations["update"]["metadata"] == {"topic": "node", "n": "2"}
    assert conversations["delete"] == {"object": "conversation.deleted", "deleted": True,
                                       "retrieve_after": 404}


def test_conversation_items(conversations):
    """conversations.items.create/list/retrieve/delete around a response in it."""
    conv_id = conversations["create"]["id"]
    created = conversations["items_create"]
    assert created["object"] == "list" and created["count"] == 2
    assert created["has_more"] is False and created["types"] == ["message", "message"]
    assert conversations["response"] == {"output_text": "amber 77 kite", "conversation": conv_id}
    listed = conversations["items_list"]["asc"]
    assert [(i["type"], i["role"]) for i in listed] == [
        ("message", "user"), ("message", "assistant"), ("message", "user"),
        ("message", "assistant")]
    assert [i["id"] for i in listed[1:3]] == created["ids"]
    assert conversations["items_list"]["desc_first"] == listed[-1]["id"]
    assert conversations["items_retrieve"] == {
        "id": listed[0]["id"], "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Reply with: amber 77 kite"}]}
    assert conversations["items_delete"] == {"object": "conversation", "id": conv_id,
                                             "remaining": [i["id"] for i in listed[1:]]}
