"""Engine death mid-job with the real engine thread and the bundled model: the jobs it held
end `failed` with `server_error`, and the model actor's fresh engine serves the next one.

This runs the actor tree in-process (model actor, registry, supervisors) because the fault
has to be injected into the engine thread; nothing else is faked."""

from __future__ import annotations

import pytest
import trio

from triode.responses.objects import plain

from triode.actors.model import ModelActor
from triode.actors.registry import Registry
from triode.actors.supervisor import Supervisor
from triode.model.engine import Engine, EngineOptions, watched
from triode.model.loading import BUNDLED_PATH
from triode.model.request import GenerationRequest, Sampling
from triode.responses.ids import new_id
from triode.responses.output import OutputAssembler
from triode.responses.prepared import Prepared

from .test_registry import a_plan


class FlakyEngine(Engine):
    """The real engine; its first instance dies on its 8th exchange, as an MLX error in the
    engine thread would."""

    instances = 0

    def steps(self, started):
        FlakyEngine.instances += 1
        if FlakyEngine.instances > 1:
            return (yield from super().steps(started))
        calls = 0

        def dying(step):
            nonlocal calls
            calls += 0 if step.idle else 1
            if calls >= 8:
                raise RuntimeError("injected engine failure")

        return (yield from watched(super().steps(started), dying))


async def start_job(registry, model, text: str, max_tokens: int = 200) -> Supervisor:
    rendered = await model.render([{"role": "user", "content": f"Reply with: {text}"}])
    info = model.info

    def assemble(builder):
        parser = info.family.parser(reasoning=info.reasoning, starts_in_reasoning=False)
        return OutputAssembler(builder, parser, resolve=lambda name: None)

    class Keeper:
        kept: list[dict] = []

        async def keep(self, plan, obj, events):
            self.kept.append(obj)

    turn = a_plan(background=True)
    generation = GenerationRequest(rendered.tokens, max_tokens, Sampling(temperature=0.0))
    handle = await registry.start(lambda: Supervisor(
        response_id=new_id("resp"), plan=turn, ready=Prepared(turn, generation, assemble),
        model=model, background=True, keeper=Keeper()), background=True)
    return handle


@pytest.mark.trio
async def test_engine_death_fails_its_jobs_and_a_fresh_engine_serves_new_ones():
    FlakyEngine.instances = 0
    async with trio.open_nursery() as nursery:
        model = await nursery.start(ModelActor(
            EngineOptions(model=str(BUNDLED_PATH), parallel=2), max_queue=4,
            engine_factory=FlakyEngine).run)
        registry = await nursery.start(Registry(background_max_jobs=8).run)
        long_job = await start_job(registry, model,
                                   "alpha beta gamma delta epsilon zeta eta theta iota kappa")
        other = await start_job(registry, model, "lambda mu nu xi omicron pi rho sigma tau")
        with trio.fail_after(60):
            failed = [plain(await long_job.wait()), plain(await other.wait())]
        for obj in failed:
            assert obj["status"] == "failed", obj
            assert obj["error"]["code"] == "server_error"
            assert obj["background"] is True
        stats = await model.statistics()
        assert stats.engine_error == "RuntimeError: injected engine failure"
        assert stats.slots_busy == 0 and stats.queue_depth == 0
        with trio.fail_after(60):
            fresh = plain(await (await start_job(registry, model, "hello")).wait())
        assert fresh["status"] == "completed"
        assert fresh["output"][0]["content"][0]["text"] == "hello"
        stats = await model.statistics()
        assert stats.engine_alive and stats.engine_restarts == 1
        assert FlakyEngine.instances == 2
        assert (await registry.statistics()).background_jobs == 0
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_failure_handling_a_step_is_an_engine_death_not_the_processes(
        monkeypatch, caplog):
    """An exception in the actor's step handling fails the jobs in flight, is logged with its
    traceback, shows in the statistics as an engine death, and a fresh engine serves the next
    job."""
    engines: list[Engine] = []

    def counted_engine(options):
        engines.append(Engine(options))
        return engines[-1]

    actor = ModelActor(EngineOptions(model=str(BUNDLED_PATH), parallel=2), max_queue=4,
                       engine_factory=counted_engine)
    first_output = actor._first_output
    failures = 0

    def failing_once(*args):
        nonlocal failures
        if not failures:
            failures += 1
            raise RuntimeError("injected step failure")
        return first_output(*args)

    monkeypatch.setattr(actor, "_first_output", failing_once)
    async with trio.open_nursery() as nursery:
        model = await nursery.start(actor.run)
        registry = await nursery.start(Registry(background_max_jobs=8).run)
        with trio.fail_after(60):
            failed = plain(await (await start_job(registry, model, "alpha beta gamma delta")).wait())
        assert failed["status"] == "failed", failed
        assert failed["error"]["code"] == "server_error"
        stats = await model.statistics()
        assert stats.engine_error == "RuntimeError: injected step failure"
        assert stats.generation.outcomes["engine_failed"] == 1
        assert stats.slots_busy == 0 and stats.queue_depth == 0
        logged = [r for r in caplog.records if r.exc_info and r.exc_info[1] is not None
                  and str(r.exc_info[1]) == "injected step failure"]
        assert len(logged) == 1 and logged[0].exc_info[2] is not None
        with trio.fail_after(60):
            fresh = plain(await (await start_job(registry, model, "hello")).wait())
        assert fresh["status"] == "completed", fresh
        assert fresh["output"][0]["content"][0]["text"] == "hello"
        stats = await model.statistics()
        assert stats.engine_alive and stats.engine_restarts == 1
        assert len(engines) == 2 and failures == 1
        nursery.cancel_scope.cancel()
