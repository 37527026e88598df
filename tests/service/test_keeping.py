"""The keeper: a response's end stored, retried while the store is down, too-large and
`store: false` jobs."""

from __future__ import annotations

import logging

import pytest
import trio

from triode.responses.objects import plain

from triode.errors import NotFound
from triode.responses import history
from triode.responses.builder import ResponseBuilder
from triode.responses.objects import usage
from triode.responses.lifecycle import Status
from triode.service.keeping import KEEP_RETRY_INTERVAL, KEEP_RETRY_SECS

from .conftest import CALLER, FakeModel, FlakyBackend, record_json, request, start_service, statuses


async def finished_turn(service):
    """A prepared `store: true` turn and its completed object and events, not kept yet."""
    plan, _ = await service.preparer().prepare(CALLER, request(input="remember me"))
    builder = ResponseBuilder("resp_kept", plan.echo)
    builder.created()
    builder.enter(Status.IN_PROGRESS)
    builder.enter(Status.COMPLETED, usage(3, 1))
    return plan, builder.obj, builder.events


async def test_keep_retries_until_the_store_comes_back(nursery, clock, caplog):
    """A store that is down at a response's end is retried every KEEP_RETRY_INTERVAL; once
    it answers again the response is stored."""
    backend = FlakyBackend()
    service = await start_service(nursery, backend=backend)
    plan, obj, events = await finished_turn(service)
    backend.down = True
    began = trio.current_time()
    kept = trio.Event()

    async def keep():
        await service.keeper().keep(plan, obj, events)
        kept.set()

    nursery.start_soon(keep)
    await trio.sleep(1.2)
    assert not kept.is_set()
    backend.down = False
    await kept.wait()
    assert trio.current_time() - began == pytest.approx(3 * KEEP_RETRY_INTERVAL)
    assert record_json(await service.turns.stored(CALLER, "resp_kept"))["response"] == plain(obj)
    retries = [r for r in caplog.records if "store unavailable, retrying" in r.getMessage()]
    assert len(retries) == 3


async def test_keep_gives_up_after_its_retry_window_and_logs_the_loss(nursery, clock, caplog):
    """A store that never comes back: keep returns after KEEP_RETRY_SECS (no exception) and
    logs that the response was not stored."""
    backend = FlakyBackend()
    service = await start_service(nursery, backend=backend)
    plan, obj, events = await finished_turn(service)
    backend.down = True
    began = trio.current_time()
    with caplog.at_level(logging.WARNING):
        await service.keeper().keep(plan, obj, events)
    waited = trio.current_time() - began
    assert KEEP_RETRY_SECS <= waited < KEEP_RETRY_SECS + KEEP_RETRY_INTERVAL
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "response resp_kept was not stored: the store (Redis) is unreachable: test"]
    backend.down = False
    with pytest.raises(NotFound):
        await service.turns.stored(CALLER, "resp_kept")


async def test_a_job_too_large_for_the_budget_is_stored_failed_without_output(nursery, clock):
    """A background job whose final object passes the byte budget is kept as `failed` with
    empty output and the too-large error, so a poll still finds an answer."""
    model = FakeModel(reply="word " * 3000)
    service = await start_service(nursery, model=model, max_bytes=40_000)
    started = await service.turns.create(CALLER, request(background=True))
    final = plain(await started.handle.wait())
    assert final["status"] == "completed"   # what the supervisor ended with
    record = record_json(await service.turns.stored(CALLER, final["id"]))
    kept = record["response"]
    assert kept["status"] == "failed"
    assert kept["output"] == []
    assert kept["error"] == {"code": "server_error", "message": history.TOO_LARGE}
    events = await service.turns.stored_events(CALLER, final["id"], -1)
    assert statuses(events) == ["response.created", "response.failed"]


async def test_a_store_false_job_is_readable_for_the_ephemeral_ttl_only(nursery, clock):
    """A `store: false` background job's result can be polled for the ephemeral TTL (not the
    store's TTL), then it is gone."""
    service = await start_service(nursery, ttl_secs=3600, ephemeral_ttl_secs=10)
    started = await service.turns.create(CALLER, request(background=True, store=False))
    final = plain(await started.handle.wait())
    ended = trio.current_time()
    await trio.sleep_until(ended + 9)
    kept = record_json(await service.turns.stored(CALLER, final["id"]))["response"]
    assert kept["status"] == "completed" and kept["output"] == final["output"]
    await trio.sleep_until(ended + 10)
    with pytest.raises(NotFound):
        await service.turns.stored(CALLER, final["id"])
