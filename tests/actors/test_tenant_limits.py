"""The tenants' table (keys to tenants, the file's errors) and the limits' handle (the
counters under it: tests/storage/test_counters.py)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from triode.actors import limits
from triode.actors.limits import TenantLimited, TenantLimitsHandle
from triode.storage.memory import MemoryCounters
from triode.storage.values import WINDOW_SECS
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


# ---- the handle ------------------------------------------------------------------------------

NOW = 1_000_000.0


async def test_the_handle_raises_429_with_openai_headers():
    clock = [NOW]
    handle = TenantLimitsHandle(MemoryCounters(), clock=lambda: clock[0])
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
