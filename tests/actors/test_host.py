"""The engine host: one thread steps every hosted engine, each by its fair share of the
thread's time (a cheap engine beside a costly one runs more steps), a load in pieces between
another engine's steps, an idle engine parks, a stop closes the engine's generator (its
finally blocks run), an engine's exception reaches its actor, and the memory release runs
after each engine's end."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from triode.actors.host import EngineHost, EngineStopping
from triode.model.engine import Insert, Step, StepOutput
from triode.model.request import GenerationRequest

log: list[tuple[str, str]] = []


class Scripted:
    """`loads` load pieces, then one Step per step while it has work (`steps` of them),
    recording each in `log` with its thread."""

    def __init__(self, name: str, *, loads: int = 0, steps: int = 0, fail_at: int = -1):
        self.name, self.loads, self.work, self.fail_at = name, loads, steps, fail_at
        self.closed = False
        self.threads: set[int] = set()

    def steps(self, started):
        try:
            for _ in range(self.loads):
                self.threads.add(threading.get_ident())
                time.sleep(0.002)   # a piece's reading
                log.append((self.name, "load"))
                yield None
            started(None, None)
            n = 0
            commands = yield Step([], idle=True)
            while True:
                self.threads.add(threading.get_ident())
                if n == self.fail_at:
                    raise RuntimeError(f"{self.name} failed")
                busy = n < self.work
                if busy:
                    time.sleep(0.002)   # a step's compute
                    log.append((self.name, "step"))
                    n += 1
                commands = yield Step([StepOutput(0, 1, "x", None)] if busy else [],
                                      idle=not busy and not commands)
        finally:
            self.closed = True


async def hosted(host: EngineHost, engine: Scripted, link) -> None:
    """Runs `engine` until its stop (what its actor does, the stop being the usual end)."""
    try:
        await host.run_engine(engine, link, lambda *a: None)
    except EngineStopping:
        pass


async def host_in(nursery) -> tuple[EngineHost, list[str]]:
    released: list[str] = []
    host = EngineHost(release=lambda: released.append("released"))
    await nursery.start(host.run)
    return host, released


@pytest.fixture(autouse=True)
def clear_log():
    log.clear()


async def test_a_load_goes_in_pieces_between_another_engine_s_steps(nursery):
    host, _ = await host_in(nursery)
    runner = Scripted("runner", steps=200)
    loader = Scripted("loader", loads=10)
    posted: list[Step] = []
    link_a = host.link(posted.append)
    link_b = host.link(lambda step: None)
    nursery.start_soon(hosted, host, runner, link_a)
    await trio.sleep(0.05)
    link_a.hand([Insert(0, GenerationRequest([1], 5))])   # wakes the parked runner
    nursery.start_soon(hosted, host, loader, link_b)
    with trio.fail_after(10):
        while len([e for e in log if e[0] == "runner"]) < 200:
            await trio.sleep(0.01)
    order = [name for name, _ in log]
    loads = [i for i, e in enumerate(log) if e == ("loader", "load")]
    assert len(loads) == 10
    between = order[loads[0]:loads[-1] + 1]
    assert between.count("runner") >= 8   # one runner step between load pieces
    assert runner.threads == loader.threads and len(runner.threads) == 1
    link_a.stop()
    link_b.stop()


async def test_a_stop_closes_the_engine_and_releases_memory(nursery):
    host, released = await host_in(nursery)
    engine = Scripted("e")
    link = host.link(lambda step: None)
    ended: list[BaseException] = []

    async def run() -> None:
        try:
            await host.run_engine(engine, link, lambda *a: None)
        except EngineStopping as exc:
            ended.append(exc)

    nursery.start_soon(run)
    await trio.sleep(0.05)
    assert not engine.closed   # parked: idle, nothing handed
    link.stop()
    with trio.fail_after(5):
        while not ended:
            await trio.sleep(0.01)
    assert engine.closed and released == ["released"]


async def test_an_engine_s_exception_reaches_its_actor_and_the_others_run_on(nursery):
    host, released = await host_in(nursery)
    dying = Scripted("dying", steps=10, fail_at=2)
    other = Scripted("other", steps=10)
    link_d, link_o = host.link(lambda s: None), host.link(lambda s: None)
    nursery.start_soon(hosted, host, other, link_o)
    link_d.hand([Insert(0, GenerationRequest([1], 5))])
    link_o.hand([Insert(0, GenerationRequest([1], 5))])
    with pytest.raises(RuntimeError, match="dying failed"):
        await host.run_engine(dying, link_d, lambda *a: None)
    with trio.fail_after(10):
        while len([e for e in log if e[0] == "other"]) < 10:
            await trio.sleep(0.01)
    assert released == ["released"]
    link_o.stop()


async def test_two_busy_engines_share_the_thread_s_time_not_its_steps(nursery):
    """A 1 ms engine beside a 10 ms one: each gets about half the time, so the cheap one
    takes several steps to the costly one's each (a step-by-step turn would hold it to the
    costly one's pace)."""
    host, _ = await host_in(nursery)

    class Costly(Scripted):
        def __init__(self, name, cost):
            super().__init__(name, steps=10_000)
            self.cost = cost

        def steps(self, started):
            started(None, None)
            yield Step([], idle=True)
            while True:
                time.sleep(self.cost)
                log.append((self.name, "step"))
                yield Step([StepOutput(0, 1, "x", None)], idle=False)

    cheap, costly = Costly("cheap", 0.001), Costly("costly", 0.010)
    links = [host.link(lambda s: None), host.link(lambda s: None)]
    nursery.start_soon(hosted, host, cheap, links[0])
    nursery.start_soon(hosted, host, costly, links[1])
    for link in links:
        link.hand([Insert(0, GenerationRequest([1], 5))])
    await trio.sleep(1.0)
    for link in links:
        link.stop()
    n_cheap = sum(1 for e in log if e[0] == "cheap")
    n_costly = sum(1 for e in log if e[0] == "costly")
    assert n_costly >= 10 and n_cheap >= 4 * n_costly   # ~10x fair; step-fair would be 1x
