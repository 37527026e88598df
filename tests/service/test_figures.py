"""The figures /health, /metrics and /ui read, gathered once from the actors (the real store
and registry actors, the fake model), and /health's report of them: ready only while the
engine runs and every store answers."""

from __future__ import annotations

import trio

from triode.errors import StoreUnavailable
from triode.service import figures
from triode.service.models import FixedModel
from triode.service.stores import Stores

from .conftest import CALLER, MODEL, FakeModel, request, start_service


async def report(service):
    f = await figures.gather(FixedModel(service.model, (MODEL,)), service.registry,
                             service.stores)
    return f, figures.health(f, service.stores, blas="test")


async def test_a_running_engine_with_every_store_answering_is_ready(nursery):
    """`ok`, each store's budget reported by name, the model's context window and slots."""
    service = await start_service(nursery)
    f, health = await report(service)
    assert f.ready and health["status"] == "ok"
    assert set(health["stores"]) == {"responses", "conversations", "reasoning_echo"}
    assert all(st is not None for st in health["stores"].values())
    assert (health["model"], health["context_window"]) == (MODEL, 4096)
    assert health["slots"] == {"total": 4, "busy": 0, "free": 4}
    assert health["store"] == {"kind": "memory", "reachable": True}


class Unreachable:
    """A shared store's handle while Redis cannot be reached."""

    async def statistics(self):
        raise StoreUnavailable("the store (Redis) is unreachable: test")


async def test_a_store_that_cannot_be_reached_is_reported_not_raised(nursery):
    """A shared store that is down: its statistics are None and the report is `degraded`,
    the other stores and the engine still reported."""
    service = await start_service(nursery)
    stores = Stores(service.responses, Unreachable(), service.echo)  # type: ignore[arg-type]
    f = await figures.gather(FixedModel(service.model, (MODEL,)), service.registry, stores)
    health = figures.health(f, stores, blas="test")
    assert not f.stores_reachable and not f.ready
    assert health["stores"]["conversations"] is None
    assert health["stores"]["responses"] is not None
    assert (health["status"], health["store"]["reachable"]) == ("degraded", False)
    assert health["engine_alive"] is True


async def test_a_dead_engine_is_degraded_and_says_why(nursery):
    """The engine down: not ready, its error in the report."""
    service = await start_service(nursery, model=FakeModel())
    service.model.alive = False
    f, health = await report(service)
    assert not f.ready and f.stores_reachable
    assert (health["status"], health["engine_error"]) == ("degraded", "engine down")


async def test_live_responses_are_counted_from_the_registry(nursery):
    """The report's responses are the registry's: one running, then none."""
    model = FakeModel()
    model.hold = trio.Event()
    service = await start_service(nursery, model=model)
    started = await service.turns.create(CALLER, request())
    assert (await report(service))[1]["responses"]["live"] == 1
    model.hold.set()
    await started.handle.wait()
    assert (await report(service))[1]["responses"]["live"] == 0


async def test_the_task_count_counts_this_test_s_own_tasks():
    """count_tasks walks the task tree from the root: a task started adds one."""
    before = figures.count_tasks()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever)
        await trio.lowlevel.checkpoint()
        assert figures.count_tasks() == before + 1
        nursery.cancel_scope.cancel()
