"""Compaction, the pure parts: the `compaction` item, its replay, and where history splits.

A compaction item stands in for every turn before it. Its `encrypted_content` is base64url
JSON `{"summary": str, "items": [kept items]}`; it is *not* encrypted (docs/architecture.md)
and is client data like any other input. Replaying a history whose last compaction item is at
position k gives: the system/developer messages before k, one user message carrying the
summary (a system message), the kept items from the blob, then everything after k. That one rule serves both
places a compaction item appears:

* `/v1/responses/compact` returns `[system/developer..., kept items..., compaction]`; a client
  that sends this output back (plus a new message) gets exactly summary + kept + new.
* a response compacted by `context_management` has output `[compaction, generated...]`; the
  next `previous_response_id` step replays its chain, and the compaction item in the middle
  drops the older inputs that its summary and kept items replace.

Split points (where the kept tail may start) are only before a user message or right after
a complete tool-call group, so a function call never leaves its output. The last user
message is always kept.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..errors import InvalidRequest
from . import codec
from .ids import new_id
from .objects import (AdditionalToolsItem, CompactionItem, CustomToolCallItem,
                      CustomToolCallOutputItem, FunctionCallItem, FunctionCallOutputItem,
                      InputTextPart, Item, MessageItem, items_of, plain)

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
SUMMARY_REQUEST = (
    "Summarize the conversation above for your own later use: the task, the facts, names, "
    "numbers and decisions established so far, what tools returned, and what remains to be "
    "done. Write only the summary.")
KEEP_TOKENS_CAP = 8192
SUMMARY_MAX_TOKENS = 1024
SUMMARY_MAX_TOKENS_LIMIT = 16384
THRESHOLD_MAX = 100_000_000
CALLS = (FunctionCallItem, CustomToolCallItem)
CALL_OUTPUTS = (FunctionCallOutputItem, CustomToolCallOutputItem)


def default_keep_tokens(context_length: int) -> int:
    return max(1, min(context_length // 16, KEEP_TOKENS_CAP))


def encode(summary: str, items: Sequence[Item]) -> str:
    return codec.encode({"summary": summary, "items": plain(list(items))})


def decode(content: str, param: str) -> tuple[str, list[dict[str, Any]]]:
    """The summary and kept items (their JSON) of a compaction item; a 400 naming `param`
    if malformed."""
    try:
        value = codec.decode(content)
    except ValueError as exc:
        raise InvalidRequest(f"compaction encrypted_content is not base64url JSON ({exc})",
                             param=param) from None
    if not (isinstance(value, dict) and isinstance(value.get("summary"), str)
            and isinstance(value.get("items"), list)
            and all(isinstance(i, dict) for i in value["items"])):
        raise InvalidRequest("compaction encrypted_content must hold a 'summary' string and "
                             "an 'items' array of item objects", param=param)
    return value["summary"], value["items"]


def compaction_item(summary: str, kept: Sequence[Item]) -> CompactionItem:
    return CompactionItem(id=new_id("cmp"), encrypted_content=encode(summary, kept))


def summary_message(summary: str) -> MessageItem:
    """The summary as the model reads it: a system message (chat templates and models take
    context there; a user message would read as a request). Marked, so that a later
    compaction summarizes it again instead of keeping it like the client's own system
    messages."""
    return MessageItem(role="system", id=new_id("msg"), status="completed",
                       content=[InputTextPart(text=SUMMARY_PREFIX + summary)],
                       triode_summary=True)


def is_system(item: Item) -> bool:
    """A client's system or developer message, or its tool declarations (`additional_tools`):
    kept by every compaction."""
    if isinstance(item, AdditionalToolsItem):
        return True
    return isinstance(item, MessageItem) and item.role in ("system", "developer") \
        and not item.triode_summary


def is_user(item: Item) -> bool:
    return isinstance(item, MessageItem) and item.role == "user"


def replay(items: list[Item]) -> list[Item]:
    """The history as the model sees it: the last compaction item replaces what precedes it
    (system/developer messages excepted) with its summary and kept items."""
    last = next((i for i in range(len(items) - 1, -1, -1)
                 if isinstance(items[i], CompactionItem)), None)
    if last is None:
        return items
    compacted = items[last]
    assert isinstance(compacted, CompactionItem)
    # Its kept items were made canonical when it was taken in (items.canonical).
    summary, kept = decode(compacted.encrypted_content, "input")
    summarized = [summary_message(summary)] if summary else []   # "": nothing was dropped
    return [*(item for item in items[:last] if is_system(item)), *summarized,
            *items_of(kept), *items[last + 1:]]


def split_points(body: list[Item]) -> list[int]:
    """Indices where a kept tail may start: before a user message, or right after a
    complete tool-call group (every call of the group has its output)."""
    points = [0]
    open_calls: set[str] = set()
    in_group = False
    for i, item in enumerate(body):
        is_output = isinstance(item, CALL_OUTPUTS)
        if isinstance(item, CALLS):
            open_calls.add(item.call_id)
            in_group = True
        elif isinstance(item, CALL_OUTPUTS):
            open_calls.discard(item.call_id)
        if i + 1 < len(body):
            nxt = body[i + 1]
            group_done = in_group and not open_calls and is_output \
                and not isinstance(nxt, CALL_OUTPUTS)
            if group_done:
                in_group = False
            if (is_user(nxt) or group_done) and i + 1 not in points:
                points.append(i + 1)
    points.append(len(body))
    return sorted(set(points))


def truncations(items: list[Item]) -> list[list[Item]]:
    """`truncation: auto`'s candidates, least dropped first: the history without its oldest
    turns, cut only at split points; system/developer messages and the last user message
    are always kept (the last one is the whole history with everything else dropped)."""
    system = [item for item in items if is_system(item)]
    body = [item for item in items if not is_system(item)]
    last_user = next((i for i in range(len(body) - 1, -1, -1) if is_user(body[i])), None)
    candidates: list[list[Item]] = []
    for start in split_points(body):
        tail = body[start:]
        if last_user is not None and start > last_user:
            tail = [body[last_user], *tail]
        if not candidates or len(tail) + len(system) < len(candidates[-1]):
            candidates.append([*system, *tail])
    return candidates


def select(items: list[Item], keep_tokens: int, count: Callable[[Item], int]
           ) -> tuple[list[Item], list[Item], list[Item]]:
    """Splits a history into (system/developer messages, items to summarize, kept items).

    Kept: the last user message, and the longest tail starting at a split point whose
    tokens (by `count`, per item) fit in `keep_tokens` together with that message."""
    system = [item for item in items if is_system(item)]
    body = [item for item in items if not is_system(item)]
    last_user = next((i for i in range(len(body) - 1, -1, -1) if is_user(body[i])), None)
    sizes = [count(item) for item in body]
    anchor = sizes[last_user] if last_user is not None else 0
    for start in split_points(body):
        # The last user message is kept even when the tail starts after it.
        extra = anchor if last_user is not None and start > last_user else 0
        if sum(sizes[start:]) + extra <= keep_tokens or start == len(body):
            break
    kept = body[start:]
    dropped = body[:start]
    if last_user is not None and start > last_user:
        kept = [body[last_user], *kept]
        dropped = [item for i, item in enumerate(dropped) if i != last_user]
    return system, dropped, kept
