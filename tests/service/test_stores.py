"""`Stores.of`: a caller's view of the store actors, every name scoped to its tenant, so what
one tenant keeps is not found by another (the real actors, over memory entries)."""

from __future__ import annotations

from triode.model.request import Sampling
from triode.responses import translate
from triode.responses.builder import ResponseBuilder
from triode.responses.conversations import conversation_object
from triode.responses.objects import item_of
from triode.storage.records import StoredResponse
from triode.tenants import Caller, Tenant

from .conftest import CALLER, request, start_service

ALICE, BOB = Caller(Tenant("alice")), Caller(Tenant("bob"))


async def test_the_default_caller_s_view_is_the_stores_themselves(nursery):
    """The default tenant's names are unscoped: its view is the same handles."""
    stores = (await start_service(nursery)).stores
    assert stores.of(CALLER) is stores
    alice = stores.of(ALICE)
    assert alice.of(ALICE) is alice
    assert {alice.responses.scope, alice.conversations.scope, alice.reasoning.scope} == {"alice"}


async def test_one_tenant_s_conversation_is_not_found_by_another(nursery):
    """The same id under two tenants is two records; the default tenant finds neither."""
    stores = (await start_service(nursery)).stores
    msg_a = item_of({"type": "message", "id": "msg_a", "role": "user", "status": "completed",
                     "content": [{"type": "input_text", "text": "a"}]})
    await stores.of(ALICE).conversations.create(conversation_object("conv_1", 1), [msg_a])
    assert await stores.of(BOB).conversations.get("conv_1") is None
    assert await stores.of(CALLER).conversations.get("conv_1") is None
    await stores.of(BOB).conversations.create(conversation_object("conv_1", 2))
    assert await stores.of(ALICE).conversations.get("conv_1") == [msg_a]
    assert await stores.of(BOB).conversations.get("conv_1") == []


async def test_one_tenant_s_response_and_reasoning_are_its_own(nursery):
    """Responses and the reasoning echo are scoped the same way."""
    stores = (await start_service(nursery)).stores
    obj = ResponseBuilder("resp_1", translate.plan(request(), Sampling()).echo).obj
    await stores.of(ALICE).responses.put("resp_1", StoredResponse.of(obj, []))
    await stores.of(ALICE).reasoning.remember([("turn", "alice thought")])
    assert await stores.of(ALICE).responses.get("resp_1") is not None
    assert await stores.of(BOB).responses.get("resp_1") is None
    assert await stores.of(BOB).reasoning.recall(["turn"]) == [None]
    assert await stores.of(ALICE).reasoning.recall(["turn"]) == ["alice thought"]
