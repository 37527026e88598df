"""The tenants' table (keys to tenants, the file's errors) and the limits' counters at their
edges on every backend: memory, Redis and SQLite answer the same."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterator

import pytest

from triode.actors import limits
from triode.actors.limits import LEASE_SECS, WINDOW_SECS, TenantLimited, TenantLimitsHandle
from triode.errors import SettingsError
from triode.tenants import (DEFAULT_TENANT, belongs_to, Limits, Tenant, Tenants, parse, scoped, single,
                            unscoped)


# ---- the table ---------------------------------------------------------------------------


def table(tenants: dict[str, Any]):
    return parse(json.dumps({"tenants": tenants}), "keys.json")


def test_a_key_finds_its_tenant_by_plain_key_or_digest():
    t = table({"alice": {"keys": ["sk-a1", "sk-a2"], "requests_per_minute": 60},
               "bob": {"key_sha256": [hashlib.sha256(b"sk-b").hexdigest().upper()]}})
    assert t.find("Bearer sk-a2") == Tenant("alice", Limits(requests_per_minute=60))
    assert t.find("bearer sk-b").name == "bob"
    for wrong in ("Bearer sk-a", "Bearer sk-a1x", "sk-a1", "", "Basic sk-a1", "Bearer "):
        assert t.find(wrong) is None, wrong


def test_api_key_and_no_key_are_the_default_tenant():
    assert single(None).find("") == DEFAULT_TENANT
    assert single("k").find("Bearer k") == DEFAULT_TENANT
    assert single("k").find("Bearer j") is None


def test_the_two_flags_exclude_each_other(tmp_path):
    path = tmp_path / "k.json"
    path.write_text('{"tenants": {"a": {"keys": ["k"]}}}')
    with pytest.raises(SettingsError, match="exclude each other"):
        Tenants.configured("k", str(path))
    with pytest.raises(SettingsError, match="No such file"):
        Tenants.configured(None, str(tmp_path / "missing.json"))


def test_a_reload_that_fails_keeps_the_table(tmp_path):
    path = tmp_path / "k.json"
    path.write_text('{"tenants": {"a": {"keys": ["k"]}}}')
    tenants = Tenants.configured(None, str(path))
    path.write_text('{"tenants": {"a": {"keys": ["k"], "concurrent_requests": "2"}}}')
    with pytest.raises(SettingsError, match="concurrent_requests"):
        tenants.reload()
    assert tenants.table.find("Bearer k").name == "a"


def test_scoped_names_never_meet():
    assert scoped("", "resp_1") == "resp_1"
    assert scoped("alice", "resp_1") == "alice/resp_1" != scoped("bob", "resp_1")
    assert scoped("alice", "bob/resp_1") != scoped("bob", "resp_1")
    assert unscoped(scoped("alice", "resp_1")) == ("alice", "resp_1")
    assert unscoped("resp_1") == ("", "resp_1")
    assert belongs_to("alice/resp_1", "alice") and not belongs_to("alice/resp_1", "bob")
    assert belongs_to("resp_1", "") and not belongs_to("alice/resp_1", "")


# ---- the counters ----------------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis", "sqlite"])
def backend(request, tmp_path) -> Iterator[limits.Backend]:
    if request.param == "memory":
        yield limits.MemoryBackend()
    elif request.param == "redis":
        import uuid

        import redis

        from ..conftest import REDIS_URL
        client = redis.Redis.from_url(REDIS_URL)
        prefix = f"triode-test-{uuid.uuid4().hex[:12]}"
        yield limits.RedisBackend(client, prefix)
        keys = list(client.scan_iter(match=f"*{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()
    else:
        from triode.actors.sqlite import Database
        db = Database(str(tmp_path / "l.db"))
        db.open()
        yield limits.SqliteBackend(db, "p")
        db.close()


NOW = 1_000_000.0


def test_a_window_admits_exactly_its_limit(backend):
    """Limit 3: three hits are admitted (counts 1, 2, 3), the fourth is not and does not
    count; the window closes WINDOW_SECS after its first hit."""
    got = [backend.hit("t:requests", 3, NOW + i) for i in range(4)]
    assert [(w.admitted, w.count) for w in got] == [(True, 1), (True, 2), (True, 3),
                                                    (False, 3)]
    assert 0 < got[-1].reset_in <= WINDOW_SECS
    assert backend.hit("other", 1, NOW).admitted        # another name has its own window


def test_a_zero_limit_admits_nothing(backend):
    assert [backend.hit("z", 0, NOW).admitted for _ in range(2)] == [False, False]
    assert backend.peek("z", NOW).count == 0


def test_charges_add_up_in_one_window(backend):
    assert backend.peek("t:tokens", NOW).count == 0
    backend.charge("t:tokens", 4, NOW)
    backend.charge("t:tokens", 1, NOW + 1)
    assert backend.peek("t:tokens", NOW + 2).count == 5


def test_tickets_admit_their_limit_and_come_back(backend):
    """Limit 2: two tickets, a third refused; a released one makes room; a ticket whose
    lease was not renewed lapses after LEASE_SECS."""
    assert [backend.acquire("t:c", t, 2, NOW).admitted for t in "abc"] == [True, True, False]
    backend.release("t:c", "a")
    assert backend.acquire("t:c", "d", 2, NOW).admitted
    backend.renew([("t:c", "b")], NOW + LEASE_SECS - 1)
    later = NOW + LEASE_SECS + 0.5                   # d lapsed, b was renewed
    assert backend.acquire("t:c", "e", 2, later).admitted
    assert not backend.acquire("t:c", "f", 2, later).admitted


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_window_opens_again_after_it_closes(kind, tmp_path):
    """(Redis keeps time itself: its window's end is its key's expiry.)"""
    if kind == "memory":
        b: limits.Backend = limits.MemoryBackend()
    else:
        from triode.actors.sqlite import Database
        db = Database(str(tmp_path / "l.db"))
        db.open()
        b = limits.SqliteBackend(db, "p")
    assert backend_hits(b, NOW) == [True, False]
    assert backend_hits(b, NOW + WINDOW_SECS - 0.001) == [False, False]
    assert backend_hits(b, NOW + WINDOW_SECS) == [True, False]


def backend_hits(b: limits.Backend, now: float) -> list[bool]:
    return [b.hit("w", 1, now).admitted for _ in range(2)]


# ---- the handle ------------------------------------------------------------------------------


async def test_the_handle_raises_429_with_openai_headers():
    clock = [NOW]
    handle = TenantLimitsHandle(limits.MemoryBackend(), clock=lambda: clock[0])
    tenant = Tenant("t", Limits(requests_per_minute=1, concurrent_requests=1,
                                output_tokens_per_minute=5))
    assert (await handle.request(tenant))["x-ratelimit-remaining-requests"] == "0"
    with pytest.raises(TenantLimited) as refused:
        await handle.request(tenant)
    assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"
    assert refused.value.headers()["Retry-After"] == "60"
    assert refused.value.headers()["x-ratelimit-reset-requests"] == "1m0s"
    ticket = await handle.begin(tenant)
    with pytest.raises(TenantLimited, match="concurrent_requests"):
        await handle.begin(tenant)
    await handle.end(ticket, 5)
    with pytest.raises(TenantLimited, match="output_tokens_per_minute") as tokens:
        await handle.begin(tenant)
    assert tokens.value.headers()["x-ratelimit-remaining-tokens"] == "0"
    assert tokens.value.type == "tokens"
    clock[0] += WINDOW_SECS
    await handle.end(await handle.begin(tenant), 0)
    assert (await handle.request(Tenant("free"))) == {}


def test_reset_durations_read_as_openais():
    assert [limits.duration(s) for s in (0.02, 1, 59.2, 60, 361)] == \
        ["20ms", "1s", "1m0s", "1m0s", "6m1s"]
