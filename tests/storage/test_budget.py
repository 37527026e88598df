"""BudgetedMap and approx_json_bytes: the store policy without trio."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from triode.storage.budget import BudgetedMap, Evictions, approx_json_bytes


def json_bytes(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def sized(n: int) -> dict[str, str]:
    """A value of exactly `n` JSON bytes (n >= 8)."""
    value = {"t": "x" * (n - 8)}
    assert approx_json_bytes(value) == n
    return value


# approx_json_bytes

realistic_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from('\n\t"\\'),
    max_size=300,
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | realistic_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(realistic_text, children, max_size=4),
    max_leaves=20,
)
output_messages = st.fixed_dictionaries(
    {
        "type": st.just("message"),
        "id": st.from_regex(r"msg_[0-9a-f]{24}", fullmatch=True),
        "status": st.sampled_from(["in_progress", "completed", "incomplete"]),
        "role": st.just("assistant"),
        "content": st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.just("output_text"),
                    "text": realistic_text,
                    "annotations": st.just([]),
                }
            ),
            max_size=2,
        ),
    }
)
responses = st.fixed_dictionaries(
    {
        "id": st.from_regex(r"resp_[0-9a-f]{24}", fullmatch=True),
        "object": st.just("response"),
        "created_at": st.integers(min_value=0, max_value=2**40),
        "status": st.sampled_from(["queued", "in_progress", "completed", "failed"]),
        "error": st.none(),
        "model": st.text(max_size=30),
        "output": st.lists(output_messages, max_size=3),
        "temperature": st.floats(min_value=0, max_value=2) | st.none(),
        "parallel_tool_calls": st.booleans(),
        "usage": st.fixed_dictionaries(
            {
                "input_tokens": st.integers(min_value=0, max_value=10**6),
                "output_tokens": st.integers(min_value=0, max_value=10**6),
                "total_tokens": st.integers(min_value=0, max_value=10**6),
            }
        ),
        "metadata": st.dictionaries(realistic_text, realistic_text, max_size=4),
        "extra": json_values,
    }
)


@given(responses)
def test_approx_json_bytes_within_ten_percent_of_compact_json(response):
    """The byte estimate of a response-shaped dict is within 10% of its compact UTF-8 JSON."""
    real = json_bytes(response)
    assert abs(approx_json_bytes(response) - real) <= 0.1 * real


def test_approx_json_bytes_counts_escapes_unicode_and_nesting():
    """Quotes, backslashes, newlines, multi-byte characters and nesting are all counted."""
    obj = {"a": 'say "hi"\\\n', "한": ["ü", 1.5, -7, None, True, False, {}, []], "n": {"x": [0]}}
    assert approx_json_bytes(obj) == json_bytes(obj)


# Deterministic policy cases, run on BudgetedMap and on the same policy in Redis
# (`budgeted`, tests/actors/conftest.py).


def test_reads_refresh_recency_for_lru(budgeted):
    """A read makes an entry most recent, so the count limit evicts the least recently used."""
    entries = budgeted(max_entries=2, max_bytes=10_000, ttl_secs=0)
    entries.put("a", 1, now=0)
    entries.put("b", 2, now=1)
    assert entries.get("a", now=2) == 1
    entries.put("c", 3, now=3)
    assert "b" not in entries
    assert entries.get("a", now=4) == 1 and entries.get("c", now=4) == 3
    assert entries.statistics().evictions == Evictions(lru=1)


def test_ttl_expires_at_exactly_the_ttl(budgeted):
    """An entry is returned until age ttl - epsilon and is gone at age exactly ttl."""
    entries = budgeted(max_entries=4, max_bytes=10_000, ttl_secs=10)
    entries.put("a", 1, now=5)
    assert entries.get("a", now=14.999) == 1
    assert entries.get("a", now=15) is None
    assert entries.statistics().evictions == Evictions(ttl=1)


def test_an_entry_with_its_own_ttl_expires_on_it_not_on_the_maps(budgeted):
    """A per-entry TTL (shorter or longer than the map's, or none where the map has none)
    decides that entry's expiry alone; each expires at exactly its own TTL."""
    entries = budgeted(max_entries=8, max_bytes=10_000, ttl_secs=10)
    entries.put("short", 1, now=0, ttl_secs=3)
    entries.put("default", 2, now=0)
    entries.put("long", 3, now=1, ttl_secs=20)
    entries.put("short2", 4, now=2, ttl_secs=3)
    assert entries.get("short", now=2.999) == 1
    assert entries.sweep(now=3) == 1 and "short" not in entries
    assert entries.sweep(now=5) == 1 and "short2" not in entries
    assert entries.get("default", now=9.999) == 2 and entries.get("default", now=10) is None
    assert entries.get("long", now=20.999) == 3 and entries.get("long", now=21) is None
    assert entries.statistics().evictions == Evictions(ttl=4)
    assert entries.statistics().bytes == 0

    forever = budgeted(max_entries=8, max_bytes=10_000, ttl_secs=0)
    forever.put("ephemeral", 1, now=0, ttl_secs=5)
    forever.put("kept", 2, now=0)
    assert forever.sweep(now=5) == 1
    assert forever.get("kept", now=10**9) == 2


def test_a_pinned_entry_keeps_its_own_ttl_for_when_it_is_unpinned(budgeted):
    entries = budgeted(max_entries=8, max_bytes=10_000, ttl_secs=100)
    entries.put("job", 1, now=0, pinned=True, ttl_secs=5)
    assert entries.get("job", now=1000) == 1
    assert entries.unpin("job", now=1000)
    assert entries.get("job", now=1004.999) == 1 and entries.get("job", now=1005) is None


def test_byte_budget_fits_exactly_and_evicts_lru_one_byte_over(budgeted):
    """Entries totalling exactly max_bytes all stay; one byte more evicts the least recent."""
    entries = budgeted(max_entries=10, max_bytes=100, ttl_secs=0)
    assert entries.put("a", sized(40), now=0)
    assert entries.put("b", sized(60), now=1)
    assert entries.statistics().bytes == 100 and len(entries) == 2
    assert entries.put("b", sized(61), now=2)
    assert "a" not in entries and entries.statistics().bytes == 61
    assert entries.statistics().evictions == Evictions(bytes=1)


def test_replacing_a_key_replaces_its_bytes(budgeted):
    """A replace subtracts the old size instead of counting both values."""
    entries = budgeted(max_entries=10, max_bytes=100, ttl_secs=0)
    entries.put("a", sized(70), now=0)
    entries.put("a", sized(20), now=1)
    assert entries.statistics().bytes == 20 and len(entries) == 1
    assert entries.statistics().evictions == Evictions()


def test_replace_restarts_the_ttl(budgeted):
    """A replace counts as a new insert for the TTL."""
    entries = budgeted(max_entries=4, max_bytes=10_000, ttl_secs=10)
    entries.put("a", 1, now=0)
    entries.put("a", 2, now=8)
    assert entries.get("a", now=17) == 2
    assert entries.get("a", now=18) is None


def test_oversize_entry_is_not_kept(budgeted):
    """An entry larger than the whole byte budget is refused and evicts nothing else."""
    entries = budgeted(max_entries=10, max_bytes=100, ttl_secs=0)
    entries.put("a", sized(50), now=0)
    assert not entries.put("big", sized(101), now=1)
    assert "big" not in entries and "a" in entries
    assert entries.statistics().evictions == Evictions(oversize=1)


def test_zero_byte_budget_accepts_and_evicts_at_once(budgeted):
    """With max_bytes 0 a put succeeds as a call but nothing is retained."""
    entries = budgeted(max_entries=10, max_bytes=0, ttl_secs=0)
    assert not entries.put("a", 1, now=0)
    assert entries.get("a", now=0) is None
    assert entries.statistics().evictions == Evictions(bytes=1)


def test_zero_ttl_never_expires(budgeted):
    """With ttl_secs 0 an entry is still there a century later."""
    entries = budgeted(max_entries=4, max_bytes=10_000, ttl_secs=0)
    entries.put("a", 1, now=0)
    assert entries.sweep(now=3e9) == 0
    assert entries.get("a", now=3e9) == 1


def test_pinned_entries_survive_ttl_and_lru_pressure(budgeted):
    """Pinned entries outlive the TTL and a flood of newer entries, and still count in stats."""
    entries = budgeted(max_entries=2, max_bytes=100, ttl_secs=10)
    assert entries.put("job", sized(30), now=0, pinned=True)
    for n in range(5):
        entries.put(f"r{n}", sized(40), now=n)
    assert entries.sweep(now=1000) == 2
    assert entries.get("job", now=1000) == sized(30)
    stats = entries.statistics()
    assert (stats.entries, stats.bytes, stats.pinned_entries, stats.pinned_bytes) == (1, 30, 1, 30)


def test_pinned_admission_is_refused_over_budget_without_evicting(budgeted):
    """A pinned put past the byte budget is refused and leaves ordinary entries alone."""
    entries = budgeted(max_entries=10, max_bytes=100, ttl_secs=0)
    entries.put("stored", sized(90), now=0)
    assert entries.put("job1", sized(60), now=1, pinned=True)
    assert not entries.put("job2", sized(41), now=2, pinned=True)
    assert "stored" in entries and "job2" not in entries
    assert entries.pin("stored", now=3) is False


def test_unpin_makes_an_entry_ordinary_as_if_inserted_now(budgeted):
    """After unpin the TTL counts from the unpin and the entry takes part in LRU again."""
    entries = budgeted(max_entries=1, max_bytes=100, ttl_secs=10)
    entries.put("job", 1, now=0, pinned=True)
    entries.put("other", 2, now=50)
    assert entries.unpin("job", now=100)
    assert "other" not in entries
    assert entries.get("job", now=109.5) == 1
    assert entries.get("job", now=110) is None


def test_append_grows_the_entry_by_its_json_size_and_keeps_its_age(budgeted):
    """Appends keep bytes equal to the whole list's JSON size and do not restart the TTL."""
    entries = budgeted(max_entries=4, max_bytes=1000, ttl_secs=10)
    assert entries.append("c", [], now=0)
    assert entries.statistics().bytes == json_bytes([])
    entries.append("c", [{"role": "user", "content": "héllo"}], now=1)
    entries.append("c", ["x", 2], now=2)
    assert entries.statistics().bytes == json_bytes([{"role": "user", "content": "héllo"}, "x", 2])
    assert entries.get("c", now=9.5) is not None
    assert entries.get("c", now=10) is None


def test_append_past_the_byte_budget_drops_the_entry(budgeted):
    """A transcript that outgrows the whole byte budget is dropped as oversize, not truncated."""
    entries = budgeted(max_entries=4, max_bytes=30, ttl_secs=0)
    entries.append("c", ["x" * 10], now=0)
    assert not entries.append("c", ["y" * 20], now=1)
    assert "c" not in entries and entries.statistics().bytes == 0
    assert entries.statistics().evictions == Evictions(oversize=1)


def test_delete_counts_only_live_entries(budgeted):
    """delete returns whether a live entry went away; an expired one counts as a TTL eviction."""
    entries = budgeted(max_entries=4, max_bytes=1000, ttl_secs=10)
    entries.put("a", 1, now=0)
    entries.put("b", 2, now=0)
    assert entries.delete("a", now=1)
    assert not entries.delete("a", now=1)
    assert not entries.delete("b", now=10)
    assert entries.statistics().evictions == Evictions(ttl=1, deleted=1)


# Reference model: the same policy, written as plainly as possible over a list.


class ReferenceModel:
    def __init__(self, max_entries: int, max_bytes: int, ttl_secs: float) -> None:
        self.max_entries, self.max_bytes, self.ttl_secs = max_entries, max_bytes, ttl_secs
        self.records: list[dict[str, Any]] = []  # least recently used first
        self.evictions = dict.fromkeys(["ttl", "lru", "bytes", "oversize", "deleted"], 0)
        self.now = 0.0

    def ordinary(self) -> list[dict[str, Any]]:
        return [r for r in self.records if not r["pinned"]]

    def pinned_bytes(self) -> int:
        return sum(r["size"] for r in self.records if r["pinned"])

    def expired(self, record: dict[str, Any]) -> bool:
        age = self.now - record["inserted_at"]
        return not record["pinned"] and self.ttl_secs > 0 and age >= self.ttl_secs

    def find(self, key: str) -> dict[str, Any] | None:
        return next((r for r in self.records if r["key"] == key), None)

    def remove(self, record: dict[str, Any], cause: str | None) -> None:
        self.records.remove(record)
        if cause:
            self.evictions[cause] += 1

    def live(self, key: str) -> dict[str, Any] | None:
        record = self.find(key)
        if record is not None and self.expired(record):
            self.remove(record, "ttl")
            return None
        return record

    def evict_to_fit(self) -> None:
        for record in [r for r in self.records if self.expired(r)]:
            self.remove(record, "ttl")
        while len(self.ordinary()) > self.max_entries:
            self.remove(self.ordinary()[0], "lru")
        while sum(r["size"] for r in self.ordinary()) > self.max_bytes:
            self.remove(self.ordinary()[0], "bytes")

    def admit(self, record: dict[str, Any]) -> bool:
        if self.max_bytes == 0 or record["size"] > self.max_bytes:
            self.evictions["bytes" if self.max_bytes == 0 else "oversize"] += 1
            return False
        self.records.append(record)
        self.evict_to_fit()
        return record in self.records

    def put(self, key: str, value: Any, pinned: bool = False) -> bool:
        old = self.find(key)
        if old is not None:
            self.remove(old, None)
        record = dict(
            key=key, value=value, size=approx_json_bytes(value), inserted_at=self.now, pinned=pinned
        )
        if pinned:
            if self.pinned_bytes() + record["size"] > self.max_bytes:
                return False
            self.records.append(record)
            return True
        return self.admit(record)

    def get(self, key: str) -> Any | None:
        record = self.live(key)
        if record is None:
            return None
        if not record["pinned"]:
            self.records.remove(record)
            self.records.append(record)
        return record["value"]

    def append(self, key: str, items: list[Any]) -> bool:
        record = self.live(key)
        if record is None:
            return self.put(key, list(items))
        grown = record["value"] + items
        growth = approx_json_bytes(grown) - record["size"]
        if record["pinned"]:
            if self.pinned_bytes() + growth > self.max_bytes:
                return False
        elif record["size"] + growth > self.max_bytes:
            self.remove(record, "oversize")
            return False
        else:
            self.records.remove(record)
            self.records.append(record)
        record["value"], record["size"] = grown, record["size"] + growth
        self.evict_to_fit()
        return True

    def delete(self, key: str) -> bool:
        record = self.live(key)
        if record is None:
            return False
        self.remove(record, "deleted")
        return True

    def pin(self, key: str) -> bool:
        record = self.live(key)
        if record is None or record["pinned"]:
            return record is not None
        if self.pinned_bytes() + record["size"] > self.max_bytes:
            return False
        record["pinned"] = True
        return True

    def unpin(self, key: str) -> bool:
        record = self.find(key)
        if record is None or not record["pinned"]:
            return self.live(key) is not None
        self.records.remove(record)
        record["pinned"], record["inserted_at"] = False, self.now
        return self.admit(record)


keys = st.sampled_from(["a", "b", "c", "d", "e", "f"])
clock_steps = st.sampled_from([0, 0.5, 1, 2.5, 5, 10])
# Hypothesis favours the first choice, so the budgets that make eviction interesting come first.
budgets = dict(
    max_entries=st.sampled_from([3, 5, 1, 0]),
    max_bytes=st.sampled_from([400, 120, 40, 0]),
    ttl_secs=st.sampled_from([10, 5, 0]),
)


class _BudgetedMapMachine(RuleBasedStateMachine):
    """Shared rules and checks; subclasses add the operations of one store."""

    @initialize(**budgets)
    def configure(self, max_entries: int, max_bytes: int, ttl_secs: float) -> None:
        self.map = BudgetedMap(max_entries=max_entries, max_bytes=max_bytes, ttl_secs=ttl_secs)
        self.model = ReferenceModel(max_entries, max_bytes, ttl_secs)

    @rule(step=clock_steps)
    def advance_clock(self, step: float) -> None:
        self.model.now += step

    @rule(key=keys)
    def get(self, key: str) -> None:
        record = self.model.find(key)
        value = self.map.get(key, self.model.now)
        assert value == self.model.get(key)
        if value is not None and not record["pinned"] and self.model.ttl_secs:
            assert self.model.now - record["inserted_at"] < self.model.ttl_secs

    @rule(key=keys)
    def delete(self, key: str) -> None:
        assert self.map.delete(key, self.model.now) == self.model.delete(key)

    @rule()
    def sweep(self) -> None:
        self.map.sweep(self.model.now)
        for record in [r for r in self.model.records if self.model.expired(r)]:
            self.model.remove(record, "ttl")

    @invariant()
    def budgets_hold_and_nothing_live_is_lost(self) -> None:
        if not hasattr(self, "map"):
            return
        model = self.model
        ordinary = model.ordinary()
        stats = self.map.statistics()
        assert len(ordinary) <= model.max_entries
        assert sum(r["size"] for r in ordinary) <= model.max_bytes
        assert model.pinned_bytes() <= model.max_bytes
        assert len(self.map) == len(model.records)
        assert all(r["key"] in self.map for r in model.records)
        assert stats.bytes == sum(r["size"] for r in model.records)
        assert stats.pinned_bytes == model.pinned_bytes()
        assert stats.evictions == Evictions(**model.evictions)


class ResponseMapMachine(_BudgetedMapMachine):
    """The response store's use: whole values put and replaced, pinned jobs."""

    @rule(key=keys, text_length=st.integers(min_value=0, max_value=150), pinned=st.booleans())
    def put(self, key: str, text_length: int, pinned: bool) -> None:
        value = {"id": key, "text": "é" * text_length}
        assert self.map.put(key, value, self.model.now, pinned=pinned) == self.model.put(
            key, value, pinned
        )

    @rule(key=keys)
    def pin(self, key: str) -> None:
        assert self.map.pin(key, self.model.now) == self.model.pin(key)

    @rule(key=keys)
    def unpin(self, key: str) -> None:
        assert self.map.unpin(key, self.model.now) == self.model.unpin(key)


class ConversationMapMachine(_BudgetedMapMachine):
    """The conversation store's use: lists that grow by appends."""

    @rule(key=keys, items=st.lists(st.text(max_size=30) | st.integers(), max_size=4))
    def append(self, key: str, items: list[Any]) -> None:
        assert self.map.append(key, items, self.model.now) == self.model.append(key, items)


step_budget = settings(max_examples=50, stateful_step_count=60, deadline=None)
TestResponseMap = step_budget(ResponseMapMachine).TestCase
TestConversationMap = step_budget(ConversationMapMachine).TestCase
TestResponseMap.__doc__ = "Random put/get/delete/pin/unpin/clock steps keep budgets, lose nothing."
TestConversationMap.__doc__ = "Random append/get/delete/clock steps keep budgets, lose nothing."
