"""The model actor's slots, queue and release rules, driven by a fake engine thread."""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing

from triode.actors.model import LARGE_RENDER_CHARS, ModelActor, text_size
from triode.errors import Overloaded
from triode.model.engine import EngineOptions, Insert, Step, StepOutput, watched
from triode.model.request import GenerationRequest
from triode.model.loading import ModelInfo


class FakeEngine:
    """Emits one token per active sequence per step, finishing at max_tokens."""

    tokenizer = None
    last = None   # the most recent instance, for tests that inspect what the engine got

    def __init__(self, options):
        self.parallel = options.parallel
        self.inserted: list[int] = []
        self.batches: list[list[int]] = []   # the Inserts each exchange brought, together
        FakeEngine.last = self

    def steps(self, started):
        started(ModelInfo(path="fake", context_length=64, eos_token_ids=(0,), vocab_size=8),
                self.tokenizer)
        active: dict[int, list[int]] = {}
        outputs: list[StepOutput] = []
        while True:
            commands = yield Step(outputs, not active)
            inserts = [cmd.uid for cmd in commands if isinstance(cmd, Insert)]
            if inserts:
                self.batches.append(inserts)
            for cmd in commands:
                if isinstance(cmd, Insert):
                    self.inserted.append(cmd.uid)
                    active[cmd.uid] = [0, cmd.request.max_tokens]
                else:
                    active.pop(cmd.uid, None)
            outputs = []
            time.sleep(0.001)
            for uid, state in list(active.items()):
                state[0] += 1
                done = state[0] >= state[1]
                outputs.append(StepOutput(uid, state[0], f"t{state[0]} ", "length" if done else None))
                if done:
                    del active[uid]


async def start(nursery, parallel=2, max_queue=1, **kw):
    actor = ModelActor(EngineOptions(model="fake", parallel=parallel), max_queue=max_queue,
                       engine_factory=FakeEngine, **kw)
    return actor, await nursery.start(actor.run)


async def test_outputs_arrive_in_order_and_end_with_a_finish_reason():
    """A request gets its tokens in order and the channel ends after the finish."""
    async with trio.open_nursery() as nursery:
        _, model = await start(nursery)
        async with model.generate(GenerationRequest([1, 2], 3)) as adm:
            outs = [o async for o in adm.outputs]
        assert [o.text for o in outs] == ["t1 ", "t2 ", "t3 "]
        assert [o.finish_reason for o in outs] == [None, None, "length"]
        nursery.cancel_scope.cancel()


async def test_slots_then_queue_then_overloaded():
    """parallel requests run, max_queue wait, one more is Overloaded; release admits a waiter."""
    async with trio.open_nursery() as nursery:
        _, model = await start(nursery, parallel=2, max_queue=1)
        a_cm = model.generate(GenerationRequest([1], 10_000))
        await a_cm.__aenter__()
        b_cm = model.generate(GenerationRequest([1], 10_000))
        await b_cm.__aenter__()
        c_cm = model.generate(GenerationRequest([1], 5))
        c = await c_cm.__aenter__()
        stats = await model.statistics()
        assert (stats.slots_busy, stats.queue_depth) == (2, 1)
        with pytest.raises(Overloaded):
            async with model.generate(GenerationRequest([1], 5)):
                pass
        assert (await model.statistics()).requests_rejected == 1
        await b_cm.__aexit__(None, None, None)           # b leaves: c takes its slot
        outs = [o async for o in c.outputs]
        assert outs[-1].finish_reason == "length" and len(outs) == 5
        await c_cm.__aexit__(None, None, None)
        stats = await model.statistics()
        assert (stats.slots_busy, stats.queue_depth) == (1, 0)
        await a_cm.__aexit__(None, None, None)
        nursery.cancel_scope.cancel()


async def test_release_frees_the_slot_at_once():
    """Leaving the generate block frees the slot before the sequence would have finished."""
    async with trio.open_nursery() as nursery:
        _, model = await start(nursery, parallel=1, max_queue=0)
        async with model.generate(GenerationRequest([1], 1_000_000)) as adm:
            await adm.outputs.receive()
            assert (await model.statistics()).slots_busy == 1
        assert (await model.statistics()).slots_busy == 0
        async with model.generate(GenerationRequest([1], 2)) as adm:
            assert len([o async for o in adm.outputs]) == 2
        nursery.cancel_scope.cancel()


async def test_slow_consumer_is_cut_off_not_waited_for():
    """A consumer that stops reading is cut off once its buffer fills; others keep going."""
    async with trio.open_nursery() as nursery:
        _, model = await start(nursery, parallel=2, max_queue=0, stream_buffer=4)
        async with model.generate(GenerationRequest([1], 1_000_000)) as slow:
            async with model.generate(GenerationRequest([1], 50)) as fast:
                outs = [o async for o in fast.outputs]
            assert outs[-1].finish_reason == "length"
            with trio.fail_after(10):
                while (await model.statistics()).slots_busy:
                    await trio.sleep(0.01)
            drained = [o async for o in slow.outputs]
            assert len(drained) == 4 and drained[-1].finish_reason is None
        nursery.cancel_scope.cancel()


async def test_idle_engine_parks_until_work_arrives():
    """With nothing to do the engine waits in trio, and a new request wakes it."""
    async with trio.open_nursery() as nursery:
        _, model = await start(nursery)
        await trio.sleep(0.05)
        steps = (await model.statistics()).steps
        await trio.sleep(0.05)
        assert (await model.statistics()).steps == steps
        async with model.generate(GenerationRequest([1], 2)) as adm:
            assert len([o async for o in adm.outputs]) == 2
        nursery.cancel_scope.cancel()


class DyingEngine(FakeEngine):
    """The first instance raises on its fourth exchange, as an MLX error in the engine thread
    would; the instances a restart creates run normally."""

    instances = 0

    def steps(self, started):
        DyingEngine.instances += 1
        if DyingEngine.instances > 1:
            return (yield from super().steps(started))
        calls = []

        def counting(step):
            calls.append(1)
            if len(calls) > 3:
                raise RuntimeError("boom")

        return (yield from watched(super().steps(started), counting))


async def test_engine_death_ends_held_requests_and_a_fresh_engine_takes_over():
    """If the engine thread dies, held requests end without a finish reason, the failure
    shows in the statistics, and a fresh engine serves the next requests."""
    DyingEngine.instances = 0
    async with trio.open_nursery() as nursery:
        actor = ModelActor(EngineOptions(model="fake", parallel=2), max_queue=1,
                           engine_factory=DyingEngine)
        model = await nursery.start(actor.run)
        async with model.generate(GenerationRequest([1], 1_000)) as adm:
            outs = [o async for o in adm.outputs]
        assert outs and outs[-1].finish_reason is None
        stats = await model.statistics()
        assert not stats.engine_alive and stats.slots_busy == 0
        assert stats.engine_error == "RuntimeError: boom" and stats.engine_restarts == 0
        # Submitted while the engine restarts: it waits for the fresh engine.
        async with model.generate(GenerationRequest([1], 3)) as adm:
            outs = [o async for o in adm.outputs]
        assert [o.finish_reason for o in outs] == [None, None, "length"]
        stats = await model.statistics()
        assert stats.engine_alive and stats.engine_restarts == 1
        assert DyingEngine.instances == 2
        nursery.cancel_scope.cancel()


class AlwaysDyingEngine(FakeEngine):
    def steps(self, started):
        """Serves (one step), then dies: each fresh engine the same."""
        started(ModelInfo(path="fake", context_length=64, eos_token_ids=(0,), vocab_size=8), None)
        yield Step([], idle=False)
        raise RuntimeError("broken for good")


async def test_an_engine_that_keeps_dying_is_given_up(monkeypatch):
    """After MAX_RESTARTS deaths within the window the actor stops restarting and refuses
    new requests with a server error naming the failure."""
    from triode.actors import model as model_module
    from triode.errors import ServerError

    monkeypatch.setattr(model_module, "RESTART_DELAY", 0.001)
    async with trio.open_nursery() as nursery:
        actor = ModelActor(EngineOptions(model="fake", parallel=1), max_queue=1,
                           engine_factory=AlwaysDyingEngine)
        model = await nursery.start(actor.run)
        with trio.fail_after(30):
            while (await model.statistics()).engine_restarts < model_module.MAX_RESTARTS:
                await trio.sleep(0.01)
            with pytest.raises(ServerError, match="broken for good"):
                while True:  # the last death is reported a moment after the last restart
                    async with model.generate(GenerationRequest([1], 3)) as adm:
                        [o async for o in adm.outputs]
                    await trio.sleep(0.01)
        stats = await model.statistics()
        assert not stats.engine_alive
        assert stats.engine_restarts == model_module.MAX_RESTARTS
        nursery.cancel_scope.cancel()


class GatedTokenizer:
    """A chat template that renders only when the test opens its gate."""

    def __init__(self):
        import threading

        self.gate = threading.Event()

    def apply_chat_template(self, messages, **kwargs):
        self.gate.wait(30)
        return "x"

    def encode(self, text, add_special_tokens=False):
        return [1]


class GatedEngine(FakeEngine):
    tokenizer = GatedTokenizer()


async def test_inserts_wait_for_a_request_still_being_rendered(monkeypatch):
    """A request submitted while another one's chat template is rendering is held back, and
    both reach the engine in the same exchange (prefilled as one batch); a request that
    arrives alone goes straight in."""
    from triode.actors import model as model_module

    monkeypatch.setattr(model_module, "ADMISSION_HOLD_MAX", 30.0)  # no deadline in this test
    GatedEngine.tokenizer = GatedTokenizer()
    async with trio.open_nursery() as nursery:
        actor = ModelActor(EngineOptions(model="fake", parallel=4), max_queue=4,
                           engine_factory=GatedEngine)
        model = await nursery.start(actor.run)
        engine = FakeEngine.last
        async with model.generate(GenerationRequest([1], 2)) as alone:
            assert len([o async for o in alone.outputs]) == 2
        assert engine.batches == [[alone.uid]]

        second: list = []

        async def render_then_generate():
            rendered = await model.render([{"role": "user", "content": "hi"}])
            async with model.generate(GenerationRequest(rendered.tokens, 2)) as adm:
                second.append(adm.uid)
                assert len([o async for o in adm.outputs]) == 2

        nursery.start_soon(render_then_generate)
        await trio.testing.wait_all_tasks_blocked()   # the render is in flight, gated
        async with model.generate(GenerationRequest([1], 2)) as first:
            await trio.sleep(0.05)
            assert engine.batches == [[alone.uid]], "held while the other request renders"
            GatedEngine.tokenizer.gate.set()
            assert len([o async for o in first.outputs]) == 2
        with trio.fail_after(10):
            while not second:
                await trio.sleep(0.01)
        assert engine.batches[1] == [first.uid, second[0]]
        nursery.cancel_scope.cancel()


def test_text_size_counts_every_string_a_template_renders():
    """Keys and string values at any depth count; numbers, booleans and None do not."""
    messages = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"role": "tool", "content": "x" * LARGE_RENDER_CHARS, "n": 5, "ok": None}]
    assert text_size(messages) == (4 + 4 + 7 + 4 + 10 + 4 + 2) + (4 + 4 + 7 + LARGE_RENDER_CHARS
                                                                  + 1 + 2)
    assert text_size(None) == 0 and text_size("abc") == 3 and text_size([("ab", 1)]) == 2
