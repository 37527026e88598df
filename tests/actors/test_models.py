"""The models registry's rules, on fake engines stepped by a real engine host: loading on
demand, one load shared by its waiters, LRU eviction under --max-loaded-models and
--max-model-memory, the never-evict guards (pinned, leased, loading, loaded for a waiter),
idle unload under trio's clock, a cancelled load, a failed load, --no-autoload, the admin
unload. Each guard's test fails when its guard is removed."""

from __future__ import annotations

import threading
import time

import pytest
import trio
import trio.testing

from triode.actors.host import EngineHost
from triode.actors.model import ModelActor
from triode.actors.models import ModelsRegistry, _Acquire
from triode.errors import ModelBusy, ModelLoadFailed, ModelNotLoaded, ModelUnavailable
from triode.model.catalog import ModelSpec
from triode.model.engine import EngineOptions, watched
from triode.model.request import GenerationRequest

from .test_model_actor import FakeEngine


class SlowEngine(FakeEngine):
    """A fake engine whose load yields `pieces` times (as the real one does between pieces
    of its weights), waits at `gate` first and at `weights` after its tokenizer is ready, if
    they are set; a model whose path starts with `broken` fails to load."""

    gate: threading.Event | None = None      # held before its tokenizer is ready
    weights: threading.Event | None = None   # held after it, before its weights are
    pieces = 3

    def __init__(self, options):
        super().__init__(options)
        self.path = options.model

    def steps(self, started):
        if self.path.startswith("broken"):
            raise RuntimeError("unknown architecture 'broken'")
        while SlowEngine.gate is not None and not SlowEngine.gate.is_set():
            time.sleep(0.002)
            yield None
        for _ in range(self.pieces):
            yield None
        inner = super().steps(started)
        step = inner.send(None)   # its tokenizer: `started`
        while SlowEngine.weights is not None and not SlowEngine.weights.is_set():
            time.sleep(0.002)     # its weights, in pieces
            yield None
        while True:
            commands = yield step
            step = inner.send(commands)


def spec(name: str, tmp_path=None, size: int = 0, **kw) -> ModelSpec:
    """A model named `name` whose weight file (when `size`) has `size` bytes."""
    source = name
    if tmp_path is not None and size:
        path = tmp_path / f"{name}.bin"
        path.write_bytes(b"\0" * size)
        source = str(path)
    return ModelSpec(names=(name, source), source=source, **kw)


async def start(nursery, specs, *, engine=None, **kw):
    """A registry of `specs` over one engine host, its model actors running `engine`
    (default SlowEngine)."""
    host = await nursery.start(EngineHost().run)
    options = lambda s: EngineOptions(model=s.path, parallel=2)  # noqa: E731

    def actor_factory(options, host, max_queue):
        return ModelActor(options, host=host, max_queue=max_queue,
                          engine_factory=engine or SlowEngine)

    kw.setdefault("max_model_memory", 1 << 40)
    registry = ModelsRegistry(tuple(specs), host=host, engine_options=options, max_queue=4,
                              actor_factory=actor_factory, **kw)
    return registry, await nursery.start(registry.run)


async def status(models) -> dict[str, str]:
    """Each model's status once no unload is still under way (an unload ends in the host
    thread, a moment after it was decided)."""
    for _ in range(500):
        found = {v.spec.id: v.status for v in await models.views()}
        if "unloading" not in found.values():
            return found
        await trio.sleep(0.01)
    return found


def waiting_for(nursery, models, name: str) -> list:
    """A request for `name` waiting in `nursery`; its lease lands in the list returned."""
    got: list = []

    async def wait() -> None:
        got.append(await models.acquire(models.find(name)))

    nursery.start_soon(wait)
    return got


async def first(got: list):
    with trio.fail_after(10):
        while not got:
            await trio.sleep(0.01)
    return got[0]


async def generate(lease, tokens: int = 3) -> int:
    async with lease.handle.generate(GenerationRequest([1], tokens)) as adm:
        return len([o async for o in adm.outputs])


@pytest.fixture(autouse=True)
def no_gate():
    SlowEngine.gate = SlowEngine.weights = None
    yield
    SlowEngine.gate = SlowEngine.weights = None


async def test_a_model_loads_when_asked_for_and_serves(nursery):
    _, models = await start(nursery, [spec("a"), spec("b")])
    assert await status(models) == {"a": "unloaded", "b": "unloaded"}
    lease = await models.acquire(models.find("b"))
    assert await status(models) == {"a": "unloaded", "b": "loaded"}
    assert await generate(lease) == 3
    await lease.release()
    view = next(v for v in await models.views() if v.spec.id == "b")
    assert view.loads == 1 and view.leases == 0 and view.load_seconds is not None


async def test_requests_waiting_for_one_load_share_it(nursery):
    SlowEngine.gate = threading.Event()
    _, models = await start(nursery, [spec("a")])
    leases = []

    async def ask():
        leases.append(await models.acquire(models.find("a")))

    async with trio.open_nursery() as waiting:
        for _ in range(3):
            waiting.start_soon(ask)
        await trio.sleep(0.05)
        view = (await models.views())[0]
        assert (view.status, view.waiting) == ("loading", 3)
        SlowEngine.gate.set()
    view = (await models.views())[0]
    assert (view.status, view.loads, view.leases) == ("loaded", 1, 3)
    for lease in leases:
        await lease.release()


async def test_the_least_recently_used_idle_model_makes_room(nursery):
    """--max-loaded-models 2: loading a third unloads the idle one used longest ago."""
    _, models = await start(nursery, [spec("a"), spec("b"), spec("c")], max_loaded_models=2)
    for name in ("a", "b", "a"):   # b is now the least recently used
        await (await models.acquire(models.find(name))).release()
    lease = await models.acquire(models.find("c"))
    assert await status(models) == {"a": "loaded", "b": "unloaded", "c": "loaded"}
    await lease.release()


async def test_a_pinned_model_is_never_unloaded_to_make_room(nursery):
    _, models = await start(nursery, [spec("a", pinned=True), spec("b"), spec("c")],
                            max_loaded_models=2)
    await (await models.acquire(models.find("a"))).release()   # a is the LRU, but pinned
    await (await models.acquire(models.find("b"))).release()
    await (await models.acquire(models.find("c"))).release()
    assert (await status(models))["a"] == "loaded"
    assert (await status(models))["b"] == "unloaded"


async def test_a_model_in_use_is_never_unloaded_and_the_newcomer_gets_503(nursery):
    """Both loaded models hold a lease: a third model cannot load; the 503 says why and
    carries Retry-After; the models in use keep serving."""
    _, models = await start(nursery, [spec("a"), spec("b"), spec("c")], max_loaded_models=2)
    a = await models.acquire(models.find("a"))
    b = await models.acquire(models.find("b"))
    with pytest.raises(ModelUnavailable) as refused:
        await models.acquire(models.find("c"))
    assert "--max-loaded-models 2" in refused.value.message
    assert refused.value.headers()["Retry-After"].isdigit() and refused.value.status == 503
    assert await status(models) == {"a": "loaded", "b": "loaded", "c": "unloaded"}
    assert await generate(a) == 3 and await generate(b) == 3
    await a.release()
    lease = await models.acquire(models.find("c"))   # a is idle now: it makes room
    assert await status(models) == {"a": "unloaded", "b": "loaded", "c": "loaded"}
    await lease.release()
    await b.release()


async def test_a_loading_model_is_never_unloaded(nursery):
    """While a's load runs (its waiter waits), a request for b cannot take its place."""
    SlowEngine.gate = threading.Event()
    _, models = await start(nursery, [spec("a"), spec("b")], max_loaded_models=1)
    got = waiting_for(nursery, models, "a")
    await trio.sleep(0.05)
    with pytest.raises(ModelUnavailable):
        await models.acquire(models.find("b"))
    SlowEngine.gate.set()
    lease = await first(got)
    assert await status(models) == {"a": "loaded", "b": "unloaded"}
    await lease.release()


async def test_a_model_loaded_for_a_waiting_request_is_leased_in_the_same_step(nursery):
    """The load's end makes every waiter a lease before any other message is handled: a
    request for another model that arrives at that moment cannot evict it (llama.cpp
    #23640). Driven step by step in the actor's own thread."""
    SlowEngine.gate = threading.Event()
    registry, models = await start(nursery, [spec("a"), spec("b")], max_loaded_models=1)
    got = waiting_for(nursery, models, "a")
    await trio.sleep(0.05)
    a = registry._models["a"]
    SlowEngine.gate.set()
    with trio.fail_after(10):
        while a.status != "loaded":
            await trio.sleep(0)    # the load ends; the waiter has not run yet
    assert a.leases and not a.waiters
    # b, asked for before a's waiter has taken its handle: a cannot go.
    _, refusal = registry._acquire(_Acquire("b", None, None, None))  # type: ignore[arg-type]
    with pytest.raises(ModelUnavailable):
        refusal.receive_nowait().unwrap()
    await (await first(got)).release()


@pytest.fixture
def clock(mock_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    """Trio's clock, jumping ahead once the test has waited 0.5 s of real time with nothing
    to run (not at once: the engine host's thread works meanwhile)."""
    mock_clock.autojump_threshold = 0.5
    return mock_clock


async def test_idle_models_unload_after_their_keep_alive(nursery, clock):
    """Each model's keep-alive from its last request: its own (300 s), a request's
    `keep_alive` (10 s), 0 (at once) and -1 (never)."""
    _, models = await start(nursery, [spec("a", keep_alive=300.0), spec("b"), spec("c"),
                                      spec("d")])
    # Every model loads before any keep-alive runs, and c (0: at once) unloads before the
    # others' start: the clock jumps to the next deadline whenever the engine host's thread
    # works longer than the threshold (a loaded machine), and that deadline must not be a
    # keep-alive's end.
    a, b, c, d = [await models.acquire(models.find(name), **keep)
                  for name, keep in (("a", {}), ("b", {"keep_alive": 10.0}),
                                     ("c", {"keep_alive": 0.0}), ("d", {"keep_alive": -1.0}))]
    await c.release()
    while (await status(models))["c"] != "unloaded":
        await trio.sleep(0.01)
    for lease in (a, b, d):
        await lease.release()
    await trio.sleep(0.5)
    assert await status(models) == {"a": "loaded", "b": "loaded", "c": "unloaded",
                                    "d": "loaded"}
    view = {v.spec.id: v for v in await models.views()}
    assert view["a"].expires_at is not None and view["d"].expires_at is None
    await trio.sleep(11)
    assert await status(models) == {"a": "loaded", "b": "unloaded", "c": "unloaded",
                                    "d": "loaded"}
    await trio.sleep(300)
    assert await status(models) == {"a": "unloaded", "b": "unloaded", "c": "unloaded",
                                    "d": "loaded"}


async def test_a_lease_held_past_the_keep_alive_keeps_the_model(nursery, clock):
    """The keep-alive counts from the last lease's end, never while one is held."""
    _, models = await start(nursery, [spec("a", keep_alive=5.0)])
    lease = await models.acquire(models.find("a"))
    await trio.sleep(60)
    assert await status(models) == {"a": "loaded"}
    await lease.release()
    await trio.sleep(6)
    assert await status(models) == {"a": "unloaded"}


async def test_a_cancel_during_the_load_cancels_it_when_nobody_else_waits(nursery):
    SlowEngine.gate = threading.Event()
    _, models = await start(nursery, [spec("a")])
    with trio.move_on_after(0.1):
        await models.acquire(models.find("a"))
    with trio.fail_after(10):
        while (await status(models))["a"] != "unloaded":
            await trio.sleep(0.01)
    # With two waiting, one cancelling leaves the load to the other.
    got = waiting_for(nursery, models, "a")
    with trio.move_on_after(0.1):
        await models.acquire(models.find("a"))
    assert (await status(models))["a"] == "loading"
    SlowEngine.gate.set()
    lease = await first(got)
    assert await generate(lease) == 3
    await lease.release()


async def test_a_load_past_the_timeout_is_a_503_and_goes_on(nursery):
    SlowEngine.gate = threading.Event()
    _, models = await start(nursery, [spec("a")])
    with pytest.raises(ModelUnavailable) as refused:
        await models.acquire(models.find("a"), timeout=0.05)
    assert "--load-timeout" in refused.value.message
    assert (await status(models))["a"] in ("loading", "unloaded")


async def test_a_model_that_fails_to_load_is_failed_and_the_others_serve(nursery):
    _, models = await start(nursery, [spec("broken-model"), spec("a")])
    with pytest.raises(ModelLoadFailed) as failed:
        await models.acquire(models.find("broken-model"))
    assert "unknown architecture 'broken'" in failed.value.message
    view = {v.spec.id: v for v in await models.views()}
    assert view["broken-model"].status == "failed"
    assert view["broken-model"].error == "RuntimeError: unknown architecture 'broken'"
    lease = await models.acquire(models.find("a"))
    assert await generate(lease) == 3
    await lease.release()
    with pytest.raises(ModelLoadFailed):   # the next request tries again
        await models.acquire(models.find("broken-model"))
    assert next(v for v in await models.views() if v.spec.id == "broken-model").loads == 2


async def test_memory_admission_unloads_lru_models_until_the_new_one_fits(nursery, tmp_path):
    """--max-model-memory 250 with models of 100 bytes: the third unloads the LRU; one of
    300 bytes can never fit and is a 503 naming the memory."""
    specs = [spec(n, tmp_path, 100) for n in ("a", "b", "c")] + [spec("big", tmp_path, 300)]
    _, models = await start(nursery, specs, max_model_memory=250)
    for name in ("a", "b", "c"):
        await (await models.acquire(models.find(name))).release()
    assert await status(models) == {"a": "unloaded", "b": "loaded", "c": "loaded",
                                    "big": "unloaded"}
    with pytest.raises(ModelUnavailable) as refused:
        await models.acquire(models.find("big"))
    assert "--max-model-memory 250" in refused.value.message
    assert (await status(models))["big"] == "unloaded"


async def test_no_autoload_refuses_an_unloaded_model_and_the_admin_load_loads_it(nursery):
    _, models = await start(nursery, [spec("a")], autoload=False)
    with pytest.raises(ModelNotLoaded) as refused:
        await models.acquire(models.find("a"))
    assert refused.value.status == 400 and refused.value.code == "model_not_loaded"
    await models.load(models.find("a"))
    lease = await models.acquire(models.find("a"))
    assert await generate(lease) == 3
    await lease.release()


async def test_the_admin_unload_refuses_a_model_in_use_and_waits_for_an_idle_one(nursery):
    _, models = await start(nursery, [spec("a")])
    lease = await models.acquire(models.find("a"))
    with pytest.raises(ModelBusy):
        await models.unload(models.find("a"))
    await lease.release()
    await models.unload(models.find("a"))
    assert await status(models) == {"a": "unloaded"}   # answered once it is unloaded


async def test_two_models_decode_at_once_on_the_one_host(nursery):
    """Two models' streams interleave: the host steps both engines in each round."""
    _, models = await start(nursery, [spec("a"), spec("b")])
    a = await models.acquire(models.find("a"))
    b = await models.acquire(models.find("b"))
    order: list[str] = []

    async def stream(lease, name):
        async with lease.handle.generate(GenerationRequest([1], 40)) as adm:
            async for _ in adm.outputs:
                order.append(name)

    async with trio.open_nursery() as both:
        both.start_soon(stream, a, "a")
        both.start_soon(stream, b, "b")
    assert order.count("a") == order.count("b") == 40
    first_half = order[:40]
    assert first_half.count("a") >= 10 and first_half.count("b") >= 10   # not one by one
    await a.release()
    await b.release()


def test_the_first_model_is_loaded_at_start():
    async def main():
        async with trio.open_nursery() as nursery:
            _, models = await start(nursery, [spec("a", preload=True), spec("b")])
            assert await status(models) == {"a": "loaded", "b": "unloaded"}
            nursery.cancel_scope.cancel()

    trio.run(main)


async def test_an_early_lease_comes_with_the_tokenizer_and_generation_waits_for_weights(
        nursery):
    """A stream's lease (`early`) is answered once the tokenizer is ready: it renders and
    queues; its tokens come once the weights are in. The model is `loading` until then, and
    a request that is not early still waits for `loaded`."""
    SlowEngine.weights = threading.Event()
    _, models = await start(nursery, [spec("a")])
    lease = await models.acquire(models.find("a"), early=True)
    assert (await status(models))["a"] == "loading"
    got: list[int] = []

    async def stream() -> None:
        got.append(await generate(lease))

    nursery.start_soon(stream)
    later = waiting_for(nursery, models, "a")
    await trio.sleep(0.1)
    assert not got and not later and (await status(models))["a"] == "loading"
    SlowEngine.weights.set()
    assert (await (await first(later)).release()) is None
    with trio.fail_after(10):
        while not got:
            await trio.sleep(0.01)
    assert got == [3] and (await status(models))["a"] == "loaded"
    await lease.release()


async def test_an_early_lease_released_during_the_load_cancels_it(nursery):
    SlowEngine.weights = threading.Event()
    _, models = await start(nursery, [spec("a")])
    lease = await models.acquire(models.find("a"), early=True)
    await lease.release()   # the stream's client went away while the weights loaded
    assert (await status(models))["a"] == "unloaded"


async def test_weights_that_fail_to_load_after_the_tokenizer_fail_the_model(nursery):
    """An engine that dies before its first step (its weights: corrupt, out of memory) is a
    failed load, not an engine to restart: the model is `failed`."""
    class DiesLoading(SlowEngine):
        def steps(self, started):
            started(None, None)
            yield None
            raise MemoryError("cannot allocate the weights")

    _, models = await start(nursery, [spec("b")], engine=DiesLoading)
    with pytest.raises(ModelLoadFailed) as failed:
        await models.acquire(models.find("b"))
    assert "MemoryError: cannot allocate the weights" in failed.value.message


async def test_one_model_s_engine_failure_restarts_that_engine_only(nursery, monkeypatch):
    """`flaky`'s engine dies under its stream: that stream ends without a finish reason and
    a fresh engine serves it next; `a`'s stream on the same host never notices."""
    from triode.actors import model as model_module

    monkeypatch.setattr(model_module, "RESTART_DELAY", 0.001)
    deaths: list[str] = []

    class FlakyOnce(SlowEngine):
        def steps(self, started):
            inner = super().steps(started)
            if self.path != "flaky" or deaths:
                return (yield from inner)

            def dying(step):
                if step.outputs and not deaths:
                    if step.outputs[0].token >= 3:
                        deaths.append(self.path)
                        raise RuntimeError("flaky's engine died")

            return (yield from watched(inner, dying))

    _, models = await start(nursery, [spec("a"), spec("flaky")], engine=FlakyOnce)
    a = await models.acquire(models.find("a"))
    flaky = await models.acquire(models.find("flaky"))
    got: dict[str, list] = {}

    async def stream(lease, name, n):
        async with lease.handle.generate(GenerationRequest([1], n)) as adm:
            got[name] = [o.finish_reason async for o in adm.outputs]

    async with trio.open_nursery() as both:
        both.start_soon(stream, a, "a", 30)
        both.start_soon(stream, flaky, "flaky", 30)
    assert deaths == ["flaky"]
    assert len(got["a"]) == 30 and got["a"][-1] == "length"
    assert got["flaky"][-1] is None          # ended by the engine's death
    assert await generate(flaky) == 3        # a fresh engine serves it
    assert (await status(models)) == {"a": "loaded", "flaky": "loaded"}
    stats = {v.spec.id: v.statistics for v in await models.views()}
    assert stats["flaky"].engine_restarts == 1 and stats["a"].engine_restarts == 0
    await a.release()
    await flaky.release()
