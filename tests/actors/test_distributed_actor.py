"""The model actor under --distributed, driven by fake engines: a rank's engine cannot be
replaced alone, and a step that never completes (a stalled rank) trips the watchdog. Either
way the group fails closed: held requests end without a finish reason, new ones get a 503,
and the GroupFailure the CLI waits on is set with the reason."""

from __future__ import annotations

import threading

import pytest
import trio

from triode.actors.model import GroupFailure, ModelActor
from triode.errors import ModelUnavailable
from triode.model.engine import EngineOptions, Step, watched
from triode.model.lockstep import RankFigures
from triode.model.request import GenerationRequest

from .test_model_actor import FakeEngine

RANKS = (RankFigures(0, 3, 0.1, 0.01), RankFigures(1, 3, 0.1, 0.02))


class StallingEngine(FakeEngine):
    """Steps a few times, then hangs inside a step (as every rank does inside a collective
    when one rank stops), until the test lets it go."""

    release = threading.Event()

    def steps(self, started):
        calls = []

        def stall(step):
            calls.append(1)
            if len(calls) == 4:
                StallingEngine.release.wait(30)

        inner = super().steps(started)
        commands = None
        while True:
            step = inner.send(commands)
            stall(step)
            commands = yield Step(step.outputs, step.idle, ranks=RANKS)


class DyingRankEngine(FakeEngine):
    """Dies at its first output, as an engine does when a peer's socket closes."""

    def steps(self, started):
        def die(step):
            if step.outputs:
                raise RuntimeError("[ring] connection to a peer was lost")

        return (yield from watched(super().steps(started), die))


def options(**kw):
    return EngineOptions(model="fake", parallel=2, distributed="tensor", **kw)


async def test_a_step_that_never_completes_trips_the_watchdog(monkeypatch):
    from triode.actors import model as model_module

    monkeypatch.setattr(model_module, "WATCHDOG_POLL", 0.05)
    StallingEngine.release.clear()
    group = GroupFailure()
    async with trio.open_nursery() as nursery:
        actor = ModelActor(options(watchdog=0.3), max_queue=1,
                           engine_factory=StallingEngine, group=group)
        model = await nursery.start(actor.run)
        with trio.fail_after(20):
            async with model.generate(GenerationRequest([1], 1_000)) as adm:
                outs = [o async for o in adm.outputs]
            assert outs and outs[-1].finish_reason is None   # its response fails
            await group.failed.wait()
        assert "--distributed-watchdog 0.3" in (group.reason or "")
        stats = await model.statistics()
        assert not stats.engine_alive and stats.slots_busy == 0
        assert stats.distributed is not None and stats.distributed.failure == group.reason
        assert stats.distributed.ranks == RANKS and stats.distributed.mode == "tensor"
        with pytest.raises(ModelUnavailable, match="group of ranks failed"):
            async with model.generate(GenerationRequest([1], 3)):
                pass
        StallingEngine.release.set()
        nursery.cancel_scope.cancel()


async def test_an_idle_group_is_not_taken_for_stalled(monkeypatch):
    """The watchdog counts only while requests run: a group idle for longer than the
    interval serves the next request."""
    from triode.actors import model as model_module

    monkeypatch.setattr(model_module, "WATCHDOG_POLL", 0.05)
    group = GroupFailure()
    async with trio.open_nursery() as nursery:
        model = await nursery.start(ModelActor(options(watchdog=0.2), max_queue=1,
                                               engine_factory=FakeEngine, group=group).run)
        await trio.sleep(0.5)
        async with model.generate(GenerationRequest([1], 3)) as adm:
            outs = [o async for o in adm.outputs]
        assert [o.finish_reason for o in outs] == [None, None, "length"]
        assert not group.failed.is_set()
        nursery.cancel_scope.cancel()


async def test_a_dead_rank_fails_the_group_instead_of_restarting_the_engine():
    group = GroupFailure()
    async with trio.open_nursery() as nursery:
        model = await nursery.start(ModelActor(options(watchdog=60), max_queue=1,
                                               engine_factory=DyingRankEngine,
                                               group=group).run)
        with trio.fail_after(20):
            async with model.generate(GenerationRequest([1], 100)) as adm:
                outs = [o async for o in adm.outputs]
            await group.failed.wait()
        assert not outs or outs[-1].finish_reason is None
        assert "connection to a peer was lost" in (group.reason or "")
        stats = await model.statistics()
        assert stats.engine_restarts == 0 and not stats.engine_alive
        nursery.cancel_scope.cancel()
