"""The registry: owns the nursery of per-response supervisors and maps id → supervisor.

Supervisors live here, not in the HTTP handler's nursery, so a response can outlive the
request that created it (a `background` job outlives it by design); cancelling one goes
through the registry. It also owns the count of active background jobs and refuses a new
one (429) at `--responses-background-max-jobs`.
"""

from __future__ import annotations

from typing import Callable

import attrs
import outcome
import trio

from ..errors import RateLimited
from .mailbox import ReplyChannel, answer, ask, reply_with
from .supervisor import Supervisor, SupervisorHandle

INBOX_SIZE = 256


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


RegistryMessage = Start | Cancel | Lookup | RegistryStatisticsRequest


@attrs.frozen
class RegistryStatistics:
    live: int
    started: int
    background_jobs: int
    background_max_jobs: int


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


class Registry:
    def __init__(self, *, background_max_jobs: int = 64) -> None:
        self._live: dict[str, SupervisorHandle] = {}
        self._jobs: set[str] = set()        # the live background ones
        self._max_jobs = background_max_jobs
        self._started = 0

    async def run(self, *, task_status: trio.TaskStatus[RegistryHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        send, inbox = trio.open_memory_channel[RegistryMessage](INBOX_SIZE)
        async with trio.open_nursery() as nursery:
            task_status.started(RegistryHandle(send))
            async for msg in inbox:
                match msg:
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
                registry._live[sup.response_id] = handle
                if background:
                    registry._jobs.add(sup.response_id)
                registry._started += 1
                task_status.started(handle)

        try:
            await sup.run(task_status=Registering())
        finally:
            self._live.pop(sup.response_id, None)
            self._jobs.discard(sup.response_id)
