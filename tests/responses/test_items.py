"""Input items → canonical dicts → chat-template messages."""

import pytest

from triode.errors import InvalidRequest
from triode.responses.convert import structure
from triode.responses.items import chat_messages, input_items
from triode.responses.wire import CreateResponse


def items_of(raw):
    return input_items(structure({"model": "m", "input": raw}, CreateResponse))


def test_tool_loop_renders_as_assistant_tool_calls_then_tool_messages():
    """Consecutive function calls merge into one assistant turn; outputs become tool messages."""
    items = items_of([
        {"role": "user", "content": "Call f with a=1, then call g with b=2"},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": '{"b": 2}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "one"},
        {"type": "function_call_output", "call_id": "call_2", "output": "two"},
    ])
    msgs = chat_messages(None, items)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool"]
    calls = msgs[1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["f", "g"]
    assert calls[0]["function"]["arguments"] == {"a": 1}      # parsed for the template
    assert msgs[2] == {"role": "tool", "tool_call_id": "call_1", "content": "one", "name": "f"}


def test_text_then_calls_share_a_turn_but_two_texts_do_not():
    """A call joins the assistant text before it; two assistant messages stay two turns."""
    items = items_of([
        {"role": "assistant", "content": "first"},
        {"role": "assistant", "content": "second"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    ])
    msgs = chat_messages(None, items)
    assert [m["content"] for m in msgs] == ["first", "second"]
    assert msgs[1]["tool_calls"][0]["id"] == "c"


def test_reasoning_attaches_to_the_next_assistant_turn():
    """A reasoning item becomes reasoning_content of the assistant turn that follows it."""
    items = items_of([
        {"role": "user", "content": "Think, then reply with: x"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"role": "assistant", "content": "x"},
    ])
    assert chat_messages(None, items)[1] == {"role": "assistant", "content": "x",
                                             "reasoning_content": "hm"}


def test_custom_and_namespaced_calls():
    """Custom calls pass their raw input as `input`; namespaced names are qualified."""
    items = items_of([
        {"type": "custom_tool_call", "call_id": "c1", "name": "patch", "input": "*** raw"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"},
        {"type": "function_call", "call_id": "c2", "name": "read", "namespace": "fs",
         "arguments": "{}"},
    ])
    msgs = chat_messages(None, items)
    assert msgs[0]["tool_calls"][0]["function"] == {"name": "patch",
                                                    "arguments": {"input": "*** raw"}}
    assert msgs[1]["name"] == "patch"
    assert msgs[2]["tool_calls"][0]["function"]["name"] == "fs.read"


def test_canonical_items_get_ids_and_keep_given_ones():
    """Items without ids get typed ids; given ids are kept."""
    items = items_of([
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "id": "fc_given"},
        {"type": "function_call_output", "call_id": "c", "output": "x"},
        {"role": "user", "content": "hi"},
    ])
    assert items[0].id == "fc_given"
    assert items[1].id.startswith("fco_") and items[2].id.startswith("msg_")


def test_non_json_arguments_stay_text():
    """Arguments that are not a JSON object reach the template as the original string."""
    msgs = chat_messages(None, items_of([
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "not json"}]))
    assert msgs[0]["tool_calls"][0]["function"]["arguments"] == "not json"


def test_an_unresolved_item_reference_is_refused_by_index():
    """An item_reference that reached translation unresolved is a 400 naming its index
    (Turns.prepare resolves them first)."""
    with pytest.raises(InvalidRequest) as exc:
        items_of([{"role": "user", "content": "a"}, {"type": "item_reference", "id": "x"}])
    assert exc.value.param == "input[1]"


def test_images_are_refused_with_the_part_path():
    """An image part is a 400 naming input[i].content[j]."""
    with pytest.raises(InvalidRequest) as exc:
        items_of([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])
    assert exc.value.param == "input[0].content[0]"


def test_turn_keys_depend_on_the_conversation_before_the_turn():
    """Equal assistant text in different conversations gets different keys; system
    messages (never inherited by a chain) and reasoning do not change a key."""
    from triode.responses.items import turn_keys

    a = [{"role": "user", "content": "Think, then reply with: violet"},
         {"role": "assistant", "content": "violet", "reasoning_content": "hm"}]
    b = [{"role": "user", "content": "Reply with: violet"},
         {"role": "assistant", "content": "violet"}]
    assert turn_keys(a)[1] != turn_keys(b)[1]
    resent = [{"role": "system", "content": "Be brief."},
              {"role": "user", "content": "Think, then reply with: violet"},
              {"role": "assistant", "content": "violet"}]
    assert turn_keys(resent)[2] == turn_keys(a)[1]
    assert turn_keys(a)[0] is None and turn_keys(resent)[0] is None
