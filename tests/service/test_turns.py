"""The turn service as the HTTP layer calls it (the real actors, the fake model): a create
ends kept for its caller only, a warm-up generates and stores nothing, counts are what a
create renders, and background mode turned off is refused by name."""

from __future__ import annotations

import pytest

from triode.errors import InvalidRequest, ModelNotFound, NotFound
from triode.responses.objects import plain
from triode.service.models import FixedModel
from triode.service.keeping import LocalResponses
from triode.service.turns import Turns
from triode.tenants import Caller, Tenant

from .conftest import CALLER, MODEL, request, start_service

OTHER = Caller(Tenant("other"))


async def finished(service, caller=CALLER, local=None, **fields):
    started = await service.turns.create(caller, request(**fields), local)
    return plain(await started.handle.wait())


async def test_a_finished_response_is_kept_for_its_caller_only(nursery):
    """A `store: true` response's input items are read back by its caller; another tenant
    asking for the same id is told it is not found."""
    service = await start_service(nursery)
    obj = await finished(service, input="remember this")
    assert obj["status"] == "completed"
    items = await service.turns.input_items(CALLER, obj["id"])
    assert [item["content"][0]["text"] for item in items] == ["remember this"]
    with pytest.raises(NotFound):
        await service.turns.input_items(OTHER, obj["id"])


async def test_a_continuation_renders_the_chain_before_its_input(nursery):
    """`previous_response_id`: the earlier turn's input and output come before this input,
    as if the client had sent them; another tenant cannot name it."""
    service = await start_service(nursery)
    first = await finished(service, input="first question")
    continued = await service.turns.count_input_tokens(CALLER, request(
        input="second question", previous_response_id=first["id"]))
    spelled_out = await service.turns.count_input_tokens(CALLER, request(input=[
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "hello there"},
        {"role": "user", "content": "second question"}]))
    alone = await service.turns.count_input_tokens(CALLER, request(input="second question"))
    assert continued == spelled_out > alone
    with pytest.raises(InvalidRequest) as refused:
        await finished(service, caller=OTHER, input="x", previous_response_id=first["id"])
    assert refused.value.code == "previous_response_not_found"


async def test_a_store_false_response_continues_only_on_its_connection(nursery):
    """Made with a connection's LocalResponses (a WebSocket's), a `store: false` response
    can be continued there; it is not in the store."""
    service = await start_service(nursery)
    local = LocalResponses()
    obj = await finished(service, local=local, input="hi", store=False)
    assert local.history(obj["id"]) is not None
    again = await finished(service, local=local, input="more",
                           previous_response_id=obj["id"])
    assert again["status"] == "completed"
    with pytest.raises(NotFound):
        await service.turns.input_items(CALLER, obj["id"])


async def test_a_warm_up_is_a_completed_response_without_output_that_can_be_continued(
        nursery):
    """`generate: false`: a completed response with no output whose usage counts its input,
    nothing generated or stored; the same connection may continue it."""
    service = await start_service(nursery)
    local = LocalResponses()
    warm_id, events = await service.turns.warm(CALLER, request(input="warm me"), local)
    done = plain(events[-1])["response"]
    assert (done["id"], done["status"], done["output"]) == (warm_id, "completed", [])
    assert done["usage"]["input_tokens"] == await service.turns.count_input_tokens(
        CALLER, request(input="warm me"))
    assert done["usage"]["output_tokens"] == 0
    with pytest.raises(NotFound):
        await service.turns.input_items(CALLER, warm_id)
    follow = await finished(service, local=local, input="go", previous_response_id=warm_id)
    assert follow["status"] == "completed"


async def test_input_tokens_are_counted_as_a_create_renders_them(nursery):
    """count_input_tokens is the created response's input_tokens."""
    service = await start_service(nursery)
    counted = await service.turns.count_input_tokens(CALLER, request(input="a b c",
                                                                     instructions="be kind"))
    obj = await finished(service, input="a b c", instructions="be kind")
    assert counted == obj["usage"]["input_tokens"]


async def test_background_mode_off_is_refused_by_name_after_the_model(nursery):
    """With background off, `background: true` is a 400 naming `background` and why; a
    wrong model is still refused first."""
    service = await start_service(nursery)
    turns = Turns(models=FixedModel(service.model, (MODEL,)), registry=service.registry,
                  stores=service.stores, background_off="responses-store-max-entries is 0")
    with pytest.raises(InvalidRequest) as refused:
        await turns.create(CALLER, request(background=True))
    assert refused.value.param == "background"
    assert "responses-store-max-entries" in refused.value.message
    with pytest.raises(ModelNotFound):
        await turns.create(CALLER, request(background=True, model="other"))
