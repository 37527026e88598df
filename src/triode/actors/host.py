"""The engine host: the one thread that touches MLX, stepping every loaded model's engine.

MLX is not safe to drive from several threads at once (mlx #3078: independent models on
separate threads crash it), so however many models are loaded, one thread runs all their
engines. Each engine is a generator (`Engine.steps`); the host advances one runnable engine
by one step (or one piece of its load) at a time, always the one that has had the least of
the thread's time (its `used` seconds; an engine that becomes runnable again starts from the
least of those already running, so idling earns it no burst; a load's pieces count
LOAD_WEIGHT times over, so a load takes a quarter of the thread beside one busy model). Two busy models thus share
the thread's time evenly whatever their step costs (a 1 ms model beside a 70 ms one runs
~70 steps to its one), and another model's next token waits at most one step of the model
before it: one chunk of a long prefill (the pacer bounds it), or one piece of a load
(LOAD_PIECE_BYTES). An engine is runnable while it loads, while it has sequences, and when
its actor handed it commands or asked it to stop; an idle engine costs nothing, and when
none is runnable the thread parks on its condition.

Each model actor holds one `EngineLink`: the commands it hands its engine, its stop flag, and
the callback its engine's steps are posted to (`ModelActor._guarded_step`, run in the trio
thread). `EngineHost.run_engine` is what the actor awaits instead of a thread of its own:
it returns when the engine ends, and raises what the engine raised.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Protocol, Sequence

import attrs
import outcome
import trio

from ..model import memory
from ..model.engine import Command, Step, Steps
from ..model.loading import ModelInfo

log = logging.getLogger(__name__)

LONG_STEP_SECS = 0.25   # a step (or load piece) this long is logged (debug): others waited
# A load piece's time counts this many times over: a load beside a busy model takes a
# quarter of the thread (its model's requests wait for it anyway), the model three quarters.
LOAD_WEIGHT = 3.0


class EngineStopping(Exception):
    """An engine's end that its actor asked for (`EngineLink.stop`) or the host's shutdown."""


class SteppedEngine(Protocol):
    """What the host runs (`model.engine.Engine`; a fake in tests)."""

    def steps(self, started: Callable[[ModelInfo, Any], None]) -> Steps: ...


class EngineLink:
    """One model actor's side of the host: the commands handed to its engine and its stop
    flag, under the host's one lock, and where its engine's steps go."""

    def __init__(self, condition: threading.Condition, post: Callable[[Step], None]):
        self._condition = condition
        self._post = post
        self._handed: list[Command] = []
        self._stopping = False

    def hand(self, commands: Sequence[Command]) -> None:
        """Called in the trio thread: the engine takes them at its next step."""
        with self._condition:
            self._handed += commands
            self._condition.notify()

    def stop(self) -> None:
        """The running engine ends at its next turn (its generator is closed)."""
        with self._condition:
            self._stopping = True
            self._condition.notify()

    def reset(self) -> None:
        """Before a fresh engine starts: nothing handed, not stopping."""
        with self._condition:
            self._stopping = False

    def clear(self) -> None:
        with self._condition:
            self._handed.clear()

    # ---- the host thread's side (under the condition's lock) ------------------------------

    def _take(self) -> list[Command]:
        commands, self._handed = self._handed, []
        return commands

    @property
    def _wanted(self) -> bool:
        return bool(self._handed) or self._stopping


@attrs.define(eq=False)
class _Hosted:
    steps: Steps
    link: EngineLink
    finished: Callable[[outcome.Outcome[None]], None]
    loading: bool = True    # until its first Step
    idle: bool = False
    used: float = 0.0       # seconds of the host thread its steps took (fair share)
    was_runnable: bool = False

    def runnable(self) -> bool:
        return self.loading or not self.idle or self.link._wanted


class EngineHost:
    """Started once per process (system.py), before the model actors."""

    def __init__(self, release: Callable[[], None] = memory.release, *,
                 abandon_after: float | None = None) -> None:
        """`release`: run in the host thread after an engine ends, so the memory its model
        held returns (model/memory.py). `abandon_after`: at shutdown, how long to wait for
        the thread to close its engines before leaving it behind (None: as long as it
        takes). Under --distributed a step can hang inside a collective for good (a rank
        stalled); the process then exits without that thread."""
        self._release = release
        self._abandon_after = abandon_after
        self._condition = threading.Condition(threading.Lock())
        self._engines: list[_Hosted] = []
        self._closing = False
        self._token: trio.lowlevel.TrioToken | None = None

    def link(self, post: Callable[[Step], None]) -> EngineLink:
        return EngineLink(self._condition, post)

    async def run(self, *, task_status: trio.TaskStatus[EngineHost] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Runs the host thread until cancelled; then every engine still hosted is closed
        (as its actor's stop would) before the thread ends."""
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._close_when_cancelled)
            task_status.started(self)
            try:
                if self._abandon_after is None:
                    await trio.to_thread.run_sync(self._loop, limiter=trio.CapacityLimiter(1))
                else:
                    await self._run_abandonable(self._abandon_after)
            finally:
                nursery.cancel_scope.cancel()

    async def _run_abandonable(self, bound: float) -> None:
        """The host thread as a daemon thread, waited for up to `bound` seconds once
        cancelled (it closes its engines meanwhile)."""
        ended = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def loop() -> None:
            try:
                self._loop()
            finally:
                try:
                    token.run_sync_soon(ended.set)
                except trio.RunFinishedError:
                    pass

        threading.Thread(target=loop, name="triode-engine-host", daemon=True).start()
        try:
            await ended.wait()
        finally:
            with trio.move_on_after(bound, shield=True):
                await ended.wait()
            if not ended.is_set():
                log.error("the engine thread did not end within %g s (a collective hangs); "
                          "leaving it behind", bound)
                with self._condition:
                    left, self._engines = self._engines, []
                for hosted in left:   # their actors stop waiting for them
                    hosted.finished(outcome.Error(EngineStopping(
                        "the engine thread was left behind")))

    async def _close_when_cancelled(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with self._condition:
                self._closing = True
                self._condition.notify()

    async def run_engine(self, engine: SteppedEngine, link: EngineLink,
                         started: Callable[[ModelInfo, Any], None]) -> None:
        """Hosts `engine` until it ends (an EngineStopping when `link.stop` ended it) and
        raises what it raised. Not cancellable, like a thread: cancel through `link.stop`."""
        assert self._token is not None, "the engine host is not running"
        done = trio.Event()
        result: list[outcome.Outcome[None]] = []
        token = self._token

        def finished(ended: outcome.Outcome[None]) -> None:   # in the host thread
            def tell() -> None:
                result.append(ended)
                done.set()
            token.run_sync_soon(tell)

        hosted = _Hosted(engine.steps(started), link, finished)
        with self._condition:
            if self._closing:
                raise EngineStopping("the engine host has stopped")
            self._engines.append(hosted)
            self._condition.notify()
        with trio.CancelScope(shield=True):
            await done.wait()
        result[0].unwrap()

    # ---- the host thread ------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._condition:
                while not self._closing and not any(e.runnable() for e in self._engines):
                    self._condition.wait()
                if self._closing:
                    closing, self._engines = self._engines, []
                else:
                    chosen = self._next()
            if self._closing:
                for hosted in closing:
                    self._end(hosted)
                return
            began = time.perf_counter()
            loading = chosen.loading
            alive = self._advance(chosen)
            took = time.perf_counter() - began
            chosen.used += took * (LOAD_WEIGHT if loading else 1.0)
            if took > LONG_STEP_SECS:
                log.debug("an engine's %s took %.2f s", "load piece" if loading else "step",
                          took)
            if not alive:
                with self._condition:
                    self._engines.remove(chosen)

    def _next(self) -> _Hosted:
        """The runnable engine that has had the least time (under the lock). One that has
        just become runnable is first brought up to the least of those that stayed so."""
        ready = [e for e in self._engines if e.runnable()]
        staying = [e.used for e in ready if e.was_runnable]
        floor = min(staying) if staying else None
        for e in self._engines:
            if e.runnable() and not e.was_runnable and floor is not None:
                e.used = max(e.used, floor)
            e.was_runnable = e.runnable()
        return min(ready, key=lambda e: e.used)

    def _advance(self, hosted: _Hosted) -> bool:
        """One step (or load piece) of one engine; False once it has ended."""
        with self._condition:
            stopping = hosted.link._stopping
            commands = None if hosted.loading or stopping else hosted.link._take()
        if stopping:
            self._end(hosted)
            return False
        try:
            step = hosted.steps.send(commands)
        except StopIteration:
            self._ended(hosted, outcome.Value(None))
            return False
        except BaseException as exc:   # the engine died: its actor decides what follows
            self._ended(hosted, outcome.Error(exc))
            return False
        if step is None:   # a piece of its load
            return True
        hosted.loading = False
        hosted.idle = step.idle
        hosted.link._post(step)
        return True

    def _end(self, hosted: _Hosted) -> None:
        """Closes a stopped engine (its actor's stop, or the host's shutdown)."""
        try:
            hosted.steps.close()   # its finally blocks: the batch, the disk tier
        except BaseException as exc:
            log.warning("closing an engine raised", exc_info=exc)
        self._ended(hosted, outcome.Error(EngineStopping()))

    def _ended(self, hosted: _Hosted, result: outcome.Outcome[None]) -> None:
        """An engine is over: its memory is given back, then its actor is told."""
        hosted.steps = _ended_steps()   # the last reference to its frame (and its model)
        try:
            self._release()
        except Exception as exc:
            log.warning("releasing an ended engine's memory failed", exc_info=exc)
        hosted.finished(result)


def _ended_steps() -> Steps:
    return
    yield   # a generator that has ended
