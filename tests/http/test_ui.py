"""The live page in process (Quart's test client, the real actors, the fake model): its files
served without a key under a strict content policy, its figures behind the key, and each
caller shown its own tenant's responses only."""

from __future__ import annotations

from triode.http.app import create_app
from triode.http.ui import OPEN_PATHS, visible_to
from triode.tenants import DEFAULT_CALLER, Caller, Tenant, scoped

from .inprocess import MODEL, handles_for

KEY = {"Authorization": "Bearer sk-key"}


async def test_the_page_s_files_need_no_key_and_allow_no_inline_code(nursery):
    """A browser navigating cannot send a key: the page, script and style are served
    without one, with a policy that allows only the page's own files."""
    client = create_app(await handles_for(nursery, api_key="sk-key"),
                        access_log=False).test_client()
    for path, kind in zip(OPEN_PATHS, ("text/html", "text/javascript", "text/css")):
        answer = await client.get(path)
        assert answer.status_code == 200
        assert answer.headers["Content-Type"].startswith(kind)
        policy = answer.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy


async def test_the_figures_are_behind_the_key(nursery):
    """/ui/events holds data: without the key it is a 401."""
    client = create_app(await handles_for(nursery, api_key="sk-key"),
                        access_log=False).test_client()
    assert (await client.get("/ui/events")).status_code == 401
    assert (await client.get("/ui/events", headers=KEY)).status_code == 200


async def test_a_snapshot_shows_the_model_the_engine_and_recent_responses(nursery):
    """Without `Accept: text/event-stream` one JSON snapshot: a finished response is in
    `recent` with its usage; nothing is live."""
    client = create_app(await handles_for(nursery), access_log=False).test_client()
    created = await (await client.post("/v1/responses", json={"model": MODEL, "input": "hi"})
                     ).get_json()
    snap = await (await client.get("/ui/events")).get_json()
    assert (snap["model"], snap["engine"]["alive"], snap["cancellable"]) == (MODEL, True, True)
    assert snap["live"] == []
    [recent] = snap["recent"]
    assert (recent["id"], recent["status"]) == (created["id"], "completed")
    assert recent["usage"]["output_tokens"] == created["usage"]["output_tokens"]


def test_a_caller_sees_its_own_tenant_s_responses_only():
    """The tenant filter: a key made by a tenant is visible to it alone; the default
    tenant's (unscoped) keys to the default caller alone."""
    alice, bob = Caller(Tenant("alice")), Caller(Tenant("bob"))
    assert visible_to(alice, scoped("alice", "resp_1"))
    assert not visible_to(bob, scoped("alice", "resp_1"))
    assert not visible_to(DEFAULT_CALLER, scoped("alice", "resp_1"))
    assert visible_to(DEFAULT_CALLER, "resp_1")
    assert not visible_to(alice, "resp_1")
