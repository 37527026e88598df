"""What every shared store backend must show through two handles on one store (two
processes): one's put is the other's get, and the budgets count both."""

from __future__ import annotations

from typing import Any


def check_one_store(one: Any, two: Any) -> None:
    """`one` and `two`: entries of one store, each with max_entries=2, max_bytes=1000."""
    assert one.put("a", [b"1"], None, size=10, index=["item_a"])
    assert two.get("a", None) == [b"1"]
    assert two.find("item_a", None) == [b"1"]
    assert two.put("b", [b"2"], None, size=10)
    assert one.put("c", [b"3"], None, size=10)     # the third entry: "a" is the LRU one
    assert one.get("a", None) is None and two.find("item_a", None) is None
    stats = one.statistics()
    assert (stats.entries, stats.bytes, stats.evictions.lru) == (2, 20, 1)
