"""The pure half of compaction: split points, what is kept, the item's blob and its replay."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triode.errors import InvalidRequest
from triode.responses import compaction
from triode.responses.objects import Item, item_of, plain


def msg(role: str, text: str) -> Item:
    return item_of({"type": "message", "role": role, "id": f"msg_{text}",
                    "content": [{"type": "input_text", "text": text}]})


def call(cid: str) -> Item:
    return item_of({"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": "f",
                    "arguments": "{}"})


def output(cid: str) -> Item:
    return item_of({"type": "function_call_output", "id": f"fco_{cid}", "call_id": cid,
                    "output": "r"})


@st.composite
def histories(draw) -> list[Item]:
    """Agent histories: user turns, each answered by text and/or tool-call groups (one or
    several calls, then all their outputs), with system messages sprinkled in."""
    items: list[Item] = []
    n = 0
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            items.append(msg("system", f"s{n}"))
        items.append(msg("user", f"u{n}"))
        for _ in range(draw(st.integers(0, 3))):
            calls = [f"c{n}_{k}" for k in range(draw(st.integers(1, 3)))]
            n += 1
            items += [call(c) for c in calls] + [output(c) for c in calls]
        if draw(st.booleans()):
            items.append(msg("assistant", f"a{n}"))
        n += 1
    return items


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(1, 40))
def test_selection_keeps_the_last_user_message_and_whole_tool_groups(items, keep_tokens):
    system, dropped, kept = compaction.select(items, keep_tokens, lambda item: 3)
    body = [i for i in items if not compaction.is_system(i)]
    assert system == [i for i in items if compaction.is_system(i)]
    last_user = [i for i in body if compaction.is_user(i)][-1]
    assert last_user in kept and last_user not in dropped
    assert sorted(map(id, dropped + kept)) == sorted(map(id, body))
    # Order is kept within each part, and everything kept after the last user message is a
    # tail of the history.
    assert dropped == [i for i in body if i in dropped]
    for part in (dropped, kept):
        calls = {i.call_id for i in part if i.type == "function_call"}
        outputs = {i.call_id for i in part if i.type == "function_call_output"}
        assert calls == outputs, "a call was separated from its output"
    # The kept tail is the longest one that fits (always at least the last user message).
    if len(kept) > 1:
        assert 3 * len(kept) <= keep_tokens


@settings(max_examples=300, deadline=None)
@given(histories())
def test_truncations_drop_oldest_turns_whole_and_keep_system_and_last_user(items):
    """truncation: auto's candidates: each drops more than the one before, keeps every
    system message and the last user message, never parts a call from its output, and the
    first drops nothing."""
    candidates = compaction.truncations(items)
    assert candidates[0] == [i for i in items if compaction.is_system(i)] + \
        [i for i in items if not compaction.is_system(i)]
    last_user = [i for i in items if compaction.is_user(i)][-1]
    sizes = [len(c) for c in candidates]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    for candidate in candidates:
        assert last_user in candidate
        assert [i for i in items if compaction.is_system(i)] == \
            [i for i in candidate if compaction.is_system(i)]
        calls = {i.call_id for i in candidate if i.type == "function_call"}
        outputs = {i.call_id for i in candidate if i.type == "function_call_output"}
        assert calls == outputs, "a call was separated from its output"


def test_split_points_are_before_users_and_after_complete_groups():
    items = [msg("user", "a"), call("1"), call("2"), output("1"), output("2"),
             msg("assistant", "b"), msg("user", "c"), call("3"), output("3")]
    assert compaction.split_points(items) == [0, 5, 6, 9]


def test_blob_round_trips_and_malformed_blobs_are_400s_naming_the_field():
    kept = [msg("user", "hi")]
    item = compaction.compaction_item("the summary", kept)
    assert item.type == "compaction" and item.id.startswith("cmp_")
    assert compaction.decode(item.encrypted_content, "x") == ("the summary", plain(kept))
    for bad in ("%%%", "bm90IGpzb24", compaction.encode("s", [])[:-3] + "e30"):
        with pytest.raises(InvalidRequest) as err:
            compaction.decode(bad, "input[2].encrypted_content")
        assert err.value.param == "input[2].encrypted_content"


def test_replay_drops_what_the_last_compaction_stands_in_for():
    old = compaction.compaction_item("older", [msg("user", "x")])
    new = compaction.compaction_item("newer", [msg("user", "kept"), msg("assistant", "k")])
    items = [msg("system", "sys"), msg("user", "dropped"), old, msg("assistant", "gone"),
             msg("developer", "dev"), new, msg("user", "after")]
    replayed = compaction.replay(items)
    texts = [(i.role, i.content[0].text) for i in replayed]
    assert texts == [("system", "sys"), ("developer", "dev"),
                     ("system", compaction.SUMMARY_PREFIX + "newer"),
                     ("user", "kept"), ("assistant", "k"), ("user", "after")]
    assert compaction.replay(items[:2]) == items[:2]
    # A later compaction summarizes the summary again; it keeps only the client's own.
    system, dropped, _ = compaction.select(replayed, 1, lambda item: 1)
    assert [i.content[0].text for i in system] == ["sys", "dev"]
    assert replayed[2] in dropped
