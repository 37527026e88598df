"""The Conversations API as pure code: items validated on the way in, the list object's
paging, and the query values refused by name."""

from __future__ import annotations

import pytest

from triode.errors import InvalidRequest
from triode.responses.conversations import (LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX,
                                            MAX_ITEMS_PER_CALL, NewItems, Paging,
                                            check_include, item_list, new_items, page)
from triode.responses.convert import structure
from triode.responses.objects import plain

def request_items(*items: dict) -> list:
    """Items as the HTTP layer structures an items.create body's."""
    return structure({"items": list(items)}, NewItems).items


ITEMS = [{"id": f"msg_{i}", "type": "message", "role": "user", "content": []} for i in range(5)]


def ids(listed: dict) -> list[str]:
    return [item["id"] for item in listed["data"]]


def test_a_page_is_newest_first_by_default_and_says_if_more_follow():
    """`desc` by default; `has_more` when items remain past `limit`; first/last ids name the
    page's ends."""
    listed = page(ITEMS, Paging(limit=2))
    assert ids(listed) == ["msg_4", "msg_3"]
    assert (listed["first_id"], listed["last_id"], listed["has_more"]) == ("msg_4", "msg_3", True)
    assert ids(page(ITEMS, Paging(limit=5, order="asc"))) == [f"msg_{i}" for i in range(5)]
    assert page(ITEMS, Paging(limit=5))["has_more"] is False


def test_after_continues_the_page_in_its_order_and_an_unknown_one_is_refused():
    """The items after `after` in the page's order; an id that is not there is a 400 naming
    `after`."""
    assert ids(page(ITEMS, Paging(after="msg_3", limit=2))) == ["msg_2", "msg_1"]
    assert ids(page(ITEMS, Paging(after="msg_3", order="asc"))) == ["msg_4"]
    empty = page(ITEMS, Paging(after="msg_0"))
    assert (empty["data"], empty["first_id"], empty["last_id"]) == ([], None, None)
    with pytest.raises(InvalidRequest) as refused:
        page(ITEMS, Paging(after="msg_missing"))
    assert refused.value.param == "after"


@pytest.mark.parametrize("query, param", [
    ({"limit": "ten"}, "limit"), ({"limit": "0"}, "limit"),
    ({"limit": str(LIST_LIMIT_MAX + 1)}, "limit"), ({"order": "newest"}, "order")])
def test_a_bad_query_value_is_a_400_naming_it(query, param):
    """`limit` must be an integer in 1..100 and `order` asc or desc."""
    with pytest.raises(InvalidRequest) as refused:
        Paging.parse(**{"after": None, "limit": None, "order": None, **query})
    assert refused.value.param == param


def test_query_values_left_out_take_their_defaults():
    """No limit is 20, no order is desc; the edges of the limit are accepted."""
    assert Paging.parse(after=None, limit=None, order=None) == Paging(None, LIST_LIMIT_DEFAULT,
                                                                      "desc")
    assert Paging.parse(after="msg_1", limit="100", order="asc") == Paging("msg_1", 100, "asc")
    assert Paging.parse(after=None, limit="1", order=None).limit == 1


def test_new_items_get_ids_and_are_limited_to_twenty_a_call():
    """Each item added is canonical and has an id; more than 20 at a time is a 400."""
    one = request_items({"role": "user", "content": "hi"})
    added = plain(new_items(one * 2))
    assert [(item["type"], item["role"]) for item in added] == [("message", "user")] * 2
    assert all(item["id"] for item in added) and added[0]["id"] != added[1]["id"]
    with pytest.raises(InvalidRequest) as refused:
        new_items(one * (MAX_ITEMS_PER_CALL + 1))
    assert refused.value.param == "items"
    assert len(new_items(one * MAX_ITEMS_PER_CALL)) == MAX_ITEMS_PER_CALL


def test_an_item_reference_cannot_be_added():
    """A conversation keeps items, not pointers to them: the reference is refused by its
    index."""
    items = request_items({"role": "user", "content": "hi"},
                          {"type": "item_reference", "id": "msg_1"})
    with pytest.raises(InvalidRequest) as refused:
        new_items(items)
    assert refused.value.param == "items[1]"


def test_include_takes_openai_values_only_and_added_items_list_whole():
    """An unknown `include` value is a 400; items.create's answer lists every item added."""
    check_include(["message.output_text.logprobs"])
    with pytest.raises(InvalidRequest):
        check_include(["everything"])
    listed = item_list(ITEMS[:2])
    assert (ids(listed), listed["first_id"], listed["last_id"], listed["has_more"]) == (
        ["msg_0", "msg_1"], "msg_0", "msg_1", False)
