"""The registry and supervisors over a fake engine: admission, refusal, cancel."""

from __future__ import annotations

import pytest
import trio

from triode.responses.objects import plain

from triode.actors.model import ModelActor
from triode.actors.registry import RECENT, Registry
from triode.actors.supervisor import Supervisor
from triode.errors import Overloaded
from triode.model.families import make_parser
from triode.model.request import GenerationRequest, Sampling
from triode.responses.convert import structure
from triode.responses.output import OutputAssembler
from triode.responses.prepared import Prepared
from triode.responses.translate import plan
from triode.responses.wire import CreateResponse

from triode.model.engine import EngineOptions

from .test_model_actor import FakeEngine


def a_plan(**fields):
    """The plan of a minimal real request."""
    return plan(structure({"model": "m", "input": "x", **fields}, CreateResponse), Sampling())


def supervisor(model, rid: str, max_tokens: int) -> Supervisor:
    turn = a_plan()
    return Supervisor(response_id=rid, plan=turn,
                      ready=Prepared(turn, GenerationRequest([1, 2], max_tokens), plain_text),
                      model=model)


def plain_text(builder):
    return OutputAssembler(builder, make_parser("none", reasoning=False,
                                                starts_in_reasoning=False),
                           resolve=lambda name: None)


async def test_a_full_queue_refuses_the_start_and_the_registry_keeps_serving():
    """Overloaded at admission reaches the caller of start(); nothing is registered, and the
    registry still starts, looks up and cancels responses afterwards."""
    async with trio.open_nursery() as nursery:
        model = await nursery.start(ModelActor(EngineOptions(model="fake", parallel=1),
                                               max_queue=0, engine_factory=FakeEngine).run)
        registry = await nursery.start(Registry().run)
        busy = await registry.start(lambda: supervisor(model, "resp_busy", 10**9))
        with pytest.raises(Overloaded):
            await registry.start(lambda: supervisor(model, "resp_refused", 3))
        assert await registry.lookup("resp_refused") is None
        assert (await registry.statistics()).live == 1
        assert await registry.cancel("resp_busy") is busy
        final = plain(await busy.wait())
        assert final["status"] == "cancelled"
        done = await registry.start(lambda: supervisor(model, "resp_after", 3))
        assert plain(await done.wait())["status"] == "incomplete"
        nursery.cancel_scope.cancel()


async def test_cancel_after_completion_changes_nothing():
    """A response that completed stays completed when a cancel arrives late."""
    async with trio.open_nursery() as nursery:
        model = await nursery.start(ModelActor(EngineOptions(model="fake", parallel=1),
                                               max_queue=0, engine_factory=FakeEngine).run)
        registry = await nursery.start(Registry().run)
        handle = await registry.start(lambda: supervisor(model, "resp_x", 2))
        obj = plain(await handle.wait())
        handle.cancel()
        assert obj["status"] == "incomplete" and plain(await handle.wait())["status"] == "incomplete"
        assert await registry.cancel("resp_x") is None
        nursery.cancel_scope.cancel()


async def test_the_overview_lists_live_responses_and_the_recent_ends():
    """A running response is in the overview's live list with its status timeline and its
    tokens so far; once ended it leaves it for the recent list (newest first), with its
    usage, and the recent list keeps only the last RECENT."""
    async with trio.open_nursery() as nursery:
        model = await nursery.start(ModelActor(EngineOptions(model="fake", parallel=1),
                                               max_queue=8, engine_factory=FakeEngine).run)
        registry = await nursery.start(Registry().run)
        busy = await registry.start(lambda: supervisor(model, "resp_busy", 10**9))
        while busy.summary().output_tokens < 3:
            await trio.sleep(0.01)
        (live,) = (await registry.overview()).live
        assert live.response_id == "resp_busy" and live.status == "in_progress"
        assert [status for status, _ in live.timeline] == ["queued", "in_progress"]
        assert live.output_tokens >= 3 and live.usage is None and not live.done
        assert live.ttft is not None and live.ttft >= 0
        await registry.cancel("resp_busy")
        await busy.wait()
        for i in range(RECENT):
            await (await registry.start(lambda: supervisor(model, f"resp_{i}", 2))).wait()
        await trio.sleep(0.01)   # the registry records an end as the supervisor's task ends
        overview = await registry.overview()
        assert overview.live == ()
        assert [s.response_id for s in overview.recent] == \
            [f"resp_{i}" for i in reversed(range(RECENT))]
        newest = overview.recent[0]
        assert newest.status == "incomplete" and newest.done
        used = newest.usage
        assert used is not None
        assert (used.input_tokens, used.cached_tokens, used.output_tokens) == (2, 0, 2)
        assert newest.output_tokens == 2
        assert [status for status, _ in newest.timeline] == \
            ["queued", "in_progress", "incomplete"]
        nursery.cancel_scope.cancel()
