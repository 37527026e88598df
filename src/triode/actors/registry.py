"""The registry: owns the nursery of per-response supervisors and maps id → supervisor.

Supervisors live here, not in the HTTP handler's nursery, so a response can outlive the
request that created it (a `background` job outlives it by design); cancelling one goes
through the registry. It also owns the count of active background jobs and refuses a new
one (429) at `--responses-background-max-jobs`.

At shutdown the registry drains (`RegistryHandle.drain`): it refuses new responses (503),
waits for the live ones to finish up to `--shutdown-timeout`, then has each one still
running end `failed` with `SHUTDOWN_REASON` (stored like any end, so its stream gets
`response.failed` and a GET finds it) and logs which ones it cut.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Callable

import attrs
import outcome
import trio

from ..errors import Overloaded, RateLimited
from ..responses.lifecycle import is_terminal
from .mailbox import ReplyChannel, answer, ask, reply_with
from .supervisor import ResponseSummary, Supervisor, SupervisorHandle

log = logging.getLogger(__name__)

INBOX_SIZE = 256
RECENT = 50   # finished responses the live page lists (`overview`)

# What the responses a drain cuts get to end and be stored: their own cleanup is bounded
# (the slot release by RELEASE_TIMEOUT, the store write by TERMINAL_HOOK_TIMEOUT, 5 s each).
CUT_GRACE = 15.0

SHUTDOWN_REASON = ("The server is shutting down, and this response did not finish within "
                   "its shutdown timeout.")


@attrs.frozen
class Start:
    make: Callable[[], Supervisor]
    background: bool
    reply: ReplyChannel[SupervisorHandle]


@attrs.frozen
class Cancel:
    response_id: str
    reply: ReplyChannel[SupervisorHandle | None]


@attrs.frozen
class Lookup:
    response_id: str
    reply: ReplyChannel[SupervisorHandle | None]


@attrs.frozen
class RegistryStatisticsRequest:
    reply: ReplyChannel[RegistryStatistics]


@attrs.frozen
class OverviewRequest:
    reply: ReplyChannel[RegistryOverview]


@attrs.frozen
class Drain:
    timeout: float
    reply: ReplyChannel[DrainReport]


RegistryMessage = Start | Cancel | Lookup | RegistryStatisticsRequest | OverviewRequest | Drain


@attrs.frozen
class DrainReport:
    """How a drain ended: how many responses finished by themselves meanwhile, and the ones
    cut (ended `failed` with the shutdown reason, by this drain or a shorter one)."""

    finished: int
    cut: tuple[str, ...]


@attrs.frozen
class RegistryStatistics:
    live: int
    started: int
    background_jobs: int
    background_max_jobs: int


@attrs.frozen
class RegistryOverview:
    """The live responses (oldest first) and the last RECENT that ended (newest first), as
    the live page (`/ui`) shows them; `draining`: the server is shutting down."""

    live: tuple[ResponseSummary, ...]
    recent: tuple[ResponseSummary, ...]
    draining: bool = False


class RegistryHandle:
    def __init__(self, inbox: trio.MemorySendChannel[RegistryMessage]):
        self._inbox = inbox

    async def start(self, make: Callable[[], Supervisor], *,
                    background: bool = False) -> SupervisorHandle:
        """Starts a supervisor and returns its handle once it is admitted; raises what
        refused it (RateLimited for a background job over the limit, Overloaded, ...)."""
        return await ask(self._inbox, lambda r: Start(make, background, r))

    async def cancel(self, response_id: str) -> SupervisorHandle | None:
        """Cancels a live response; returns its handle, or None when it is not live."""
        return await ask(self._inbox, lambda r: Cancel(response_id, r))

    async def lookup(self, response_id: str) -> SupervisorHandle | None:
        return await ask(self._inbox, lambda r: Lookup(response_id, r))

    async def statistics(self) -> RegistryStatistics:
        return await ask(self._inbox, RegistryStatisticsRequest)

    async def overview(self) -> RegistryOverview:
        return await ask(self._inbox, OverviewRequest)

    async def drain(self, timeout: float) -> DrainReport:
        """From now on refuses new responses; waits up to `timeout` seconds for the live
        ones to end, then ends those still running as `failed` (the server is shutting
        down). Returns once every one has ended and been stored. A second call with a
        shorter timeout (a second signal) cuts sooner."""
        return await ask(self._inbox, lambda r: Drain(timeout, r))


class Registry:
    def __init__(self, *, background_max_jobs: int = 64) -> None:
        self._live: dict[str, SupervisorHandle] = {}
        self._jobs: set[str] = set()        # the live background ones
        self._max_jobs = background_max_jobs
        self._started = 0
        self._ended = 0
        self._cut: list[str] = []           # every response a drain has cut
        self._draining = False
        self._left = trio.Event()           # set (and renewed) whenever a response ends
        self._recent: deque[ResponseSummary] = deque(maxlen=RECENT)   # newest last

    async def run(self, *, task_status: trio.TaskStatus[RegistryHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        send, inbox = trio.open_memory_channel[RegistryMessage](INBOX_SIZE)
        async with trio.open_nursery() as nursery:
            task_status.started(RegistryHandle(send))
            async for msg in inbox:
                match msg:
                    case Start(reply=reply) if self._draining:
                        reply_with(reply, outcome.Error(Overloaded(
                            "The server is shutting down and takes no new responses; "
                            "retry on another instance or after it restarts.")))
                    case Start(make=make, background=background, reply=reply):
                        if background and len(self._jobs) >= self._max_jobs:
                            reply_with(reply, outcome.Error(RateLimited(
                                f"{len(self._jobs)} background responses are already active "
                                f"(--responses-background-max-jobs is {self._max_jobs}); "
                                "retry after one finishes")))
                            continue
                        try:
                            handle = await nursery.start(self._supervise, make(), background)
                        except Exception as exc:  # refused before admission (e.g. Overloaded)
                            reply_with(reply, outcome.Error(exc))
                            continue
                        answer(reply, lambda: handle)
                    case Cancel(response_id=rid, reply=reply):
                        answer(reply, lambda: self._cancel(rid))
                    case Lookup(response_id=rid, reply=reply):
                        answer(reply, lambda: self._live.get(rid))
                    case RegistryStatisticsRequest(reply=reply):
                        answer(reply, lambda: RegistryStatistics(
                            len(self._live), self._started, len(self._jobs), self._max_jobs))
                    case OverviewRequest(reply=reply):
                        answer(reply, lambda: RegistryOverview(
                            tuple(handle.summary() for handle in self._live.values()),
                            tuple(reversed(self._recent)), self._draining))
                    case Drain(timeout=timeout, reply=reply):
                        self._draining = True
                        nursery.start_soon(self._drain, timeout, reply)

    async def _drain(self, timeout: float, reply: ReplyChannel[DrainReport]) -> None:
        # A task of the registry's own tree (like `_supervise`): it reads `_live` directly.
        ended_before, cut_before = self._ended, len(self._cut)
        with trio.move_on_after(timeout):
            await self._all_ended()
        cut = [rid for rid, handle in self._live.items()
               if not is_terminal(handle.status)]
        if cut:
            jobs = sum(rid in self._jobs for rid in cut)
            log.warning("shutdown timeout (%g s) reached: ending %d unfinished response%s as "
                        "failed (%d background): %s", timeout, len(cut),
                        "" if len(cut) == 1 else "s", jobs, ", ".join(cut))
            for rid in cut:
                self._live[rid].shut_down(SHUTDOWN_REASON)
            self._cut += cut
        # Each cut one ends within its own bounded cleanup (slot release, store write).
        await self._all_ended()
        all_cut = tuple(self._cut[cut_before:])
        reply_with(reply, outcome.Value(DrainReport(self._ended - ended_before - len(all_cut),
                                                    all_cut)))

    async def _all_ended(self) -> None:
        while self._live:
            await self._left.wait()

    def _cancel(self, response_id: str) -> SupervisorHandle | None:
        handle = self._live.get(response_id)
        if handle is not None:
            handle.cancel()
        return handle

    async def _supervise(self, sup: Supervisor, background: bool, *,
                         task_status: trio.TaskStatus[SupervisorHandle]) -> None:
        # Runs inside the registry's nursery: the registry's own task tree owns `_live`.
        registry = self

        class Registering:
            """Registers the supervisor the moment it is admitted, before anyone can look."""

            def started(self, handle: SupervisorHandle | None = None) -> None:
                assert handle is not None
                registry._live[sup.key] = handle
                if background:
                    registry._jobs.add(sup.key)
                registry._started += 1
                task_status.started(handle)

        try:
            await sup.run(task_status=Registering())
        finally:
            if (ended := self._live.pop(sup.key, None)) is not None:
                self._ended += 1
                self._recent.append(ended.summary())
            self._jobs.discard(sup.key)
            self._left.set()
            self._left = trio.Event()
