"""Background jobs and live responses, in this process and across processes.

`Jobs` admits background jobs (their bytes pinned in the response store first), finds a
response that has not finished (`find_live`: a supervisor here, or a job another process on
the same shared store runs), cancels one, and stores as failed the jobs of processes that
stopped (`reap`: at start, the jobs a restart interrupted; then, as their leases run out).
A job another process runs is read through the job board as a `RemoteJob` (remote.py): its
stored record, its mirrored events, its owner's lease.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import AsyncIterator, Callable, Protocol, Sequence

import attrs
import trio

from ..actors.jobs import JobBoardHandle
from ..actors.registry import RegistryHandle
from ..actors.store import ResponseStoreHandle
from ..storage.records import StoredResponse
from ..actors.supervisor import Supervisor, SupervisorHandle
from ..errors import InvalidRequest, RateLimited, StoreUnavailable
from ..responses import history
from ..responses.builder import ResponseBuilder
from ..responses.lifecycle import TERMINAL_STATUSES, Status
from ..responses.objects import (ResponseError, ResponseEvent, ResponseObject, StreamEvent,
                                usage)
from ..responses.translate import Plan
from ..tenants import Caller, unscoped
from .remote import RemoteJob

log = logging.getLogger(__name__)

CANCEL_TIMEOUT = 5.0
ORPHANED = ("the server process running this background response stopped (its lease "
            "expired) before the response finished")
RESTARTED = ("the server restarted before this background response finished (the process "
             "running it stopped)")


class LiveResponse(Protocol):
    """What a reader of a running response uses (SupervisorHandle and RemoteJob)."""

    response_id: str

    @property
    def done(self) -> bool: ...

    @property
    def background(self) -> bool: ...

    def polled(self) -> ResponseObject: ...

    async def wait(self) -> ResponseObject: ...

    def follow_batches(self, starting_after: int = -1
                       ) -> AsyncIterator[Sequence[StreamEvent]]: ...


class Jobs:
    def __init__(self, *, registry: RegistryHandle, responses: ResponseStoreHandle,
                 board: JobBoardHandle | None = None, background_off: str | None = None):
        """`responses`: the response store's handle, every tenant's (a call's `caller`
        picks its own). `board`: the job board of a shared store (background jobs across
        processes). `background_off`: why background mode is off (one of its budgets is 0),
        if so. The registry and the board know a response by its caller's key
        (`Caller.key`)."""
        self._registry = registry
        self._responses = responses
        self._board = board
        self.background_off = background_off

    def _responses_of(self, caller: Caller) -> ResponseStoreHandle:
        return attrs.evolve(self._responses, scope=caller.scope)

    async def start(self, caller: Caller, response_id: str, plan: Plan,
                    make: Callable[[], Supervisor]) -> SupervisorHandle:
        """Accepts a background job: its approximate bytes are pinned in the response store
        (429 when the active jobs would pass the byte budget), the registry counts it (429 at
        max-jobs) and the model actor queues it (503 when full)."""
        builder = ResponseBuilder(response_id, plan.echo, background=True)
        builder.created()
        queued = builder.obj
        # Room for the most the job's end can need: if its final object does not fit the
        # budget, the `failed` one the keeper stores instead must (usage at its widest).
        widest = attrs.evolve(queued, usage=usage(*(history.USAGE_BOUND,) * 4))
        failed, events = history.too_large(widest, builder.events[0])
        fallback = StoredResponse.of(failed, plan.items, events, ephemeral=not plan.store)
        # Claimed before it is stored: a stored unfinished job always has an owner on the
        # board, so a restart (or another process, once the lease runs out) can fail it.
        key = caller.key(response_id)
        responses = self._responses_of(caller)
        if self._board is not None:
            await self._board.claim(key)
        stored = False
        try:
            if not await responses.put(response_id, StoredResponse.of(queued, plan.items),
                                             pinned=True, reserve=fallback.size):
                raise RateLimited("the active background responses would exceed "
                                  "--responses-store-max-bytes; retry after one finishes")
            stored = True
            handle = await self._registry.start(make, background=True)
        except BaseException:
            with trio.move_on_after(CANCEL_TIMEOUT, shield=True):
                with contextlib.suppress(StoreUnavailable):
                    if stored:
                        await responses.delete(response_id)
                    if self._board is not None:
                        await self._board.release(key)
            raise
        if self._board is not None:   # other processes on the store can follow and cancel it
            await self._board.mirror(handle)
        return handle

    async def find_live(self, caller: Caller, response_id: str) -> LiveResponse | None:
        """The response, if it has not finished: running here, or a background job another
        process on the shared store runs."""
        here = await self._registry.lookup(caller.key(response_id))
        if here is not None and not here.done:
            return here
        return await self._remote(caller, response_id)

    async def live(self, caller: Caller, response_id: str) -> LiveResponse | None:
        """A response still running whose state is readable while it runs (a background
        job, or a stored one; with a shared store also a job another process runs), else
        None."""
        found = await self.find_live(caller, response_id)
        if isinstance(found, SupervisorHandle) and \
                not (found.background or found.snapshot.store):
            return None   # a `store: false` response answers only its own request
        return found

    async def check_deletable(self, caller: Caller, response_id: str) -> None:
        """An unfinished background job must be cancelled before it is deleted (400)."""
        live = await self.find_live(caller, response_id)
        if live is not None and live.background:
            raise InvalidRequest(f"background response '{response_id}' has not finished "
                                 f"(status: {live.polled().status.value}); cancel it "
                                 "before "
                                 "deleting it", param="response_id")

    async def cancel(self, caller: Caller, response_id: str) -> ResponseObject | None:
        """Cancels a live response and waits for its end. Returns its final object when
        nothing is stored to answer with instead (neither `store` nor background), else
        None. A job another process runs is cancelled by its owner (asked through the job
        board); this waits up to CANCEL_TIMEOUT for it to end there."""
        key = caller.key(response_id)
        here = await self._registry.cancel(key)
        if here is not None:
            obj = await here.wait()
            return None if obj.store or here.background else obj
        remote = await self._remote(caller, response_id)
        if remote is not None:
            assert self._board is not None
            await self._board.request_cancel(key)
            with trio.move_on_after(CANCEL_TIMEOUT):
                await remote.wait()
        return None

    async def abandon(self, caller: Caller, handle: LiveResponse) -> None:
        """A client that went away (disconnect, cancelled request) cancels its live
        response."""
        if not handle.done:
            with trio.move_on_after(CANCEL_TIMEOUT, shield=True):
                await self._registry.cancel(caller.key(handle.response_id))

    async def _remote(self, caller: Caller, response_id: str) -> RemoteJob | None:
        """A background job another process on the shared store is running, if it is one."""
        if self._board is None:
            return None
        responses = self._responses_of(caller)
        record = await responses.get(response_id)
        if record is None or record.response.status in TERMINAL_STATUSES \
                or not record.response.background:
            return None
        key = caller.key(response_id)
        owner = await self._board.owner(key)
        if owner is None or owner == self._board.worker_id:
            return None
        job = RemoteJob(self._board, record, key=key,
                        reread=functools.partial(responses.get, response_id))
        await job.read_on()
        return job

    # ---- orphans -----------------------------------------------------------------------

    async def reap(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                   ) -> None:
        """Stores the jobs of processes that stopped as failed: reports started once those
        a restart interrupted (their process is gone: it ran on this machine, or its lease
        ran out) are failed, then fails the others as their leases run out."""
        if self._board is None:
            task_status.started()
            return
        try:
            interrupted = await self._board.orphaned()
        except StoreUnavailable as exc:
            log.warning("background responses of stopped processes not checked: %s",
                        exc.message)
            interrupted = []
        for response_id in interrupted:
            with contextlib.suppress(StoreUnavailable):
                await self._fail_orphan(response_id, RESTARTED)
        task_status.started()
        async for response_id in self._board.orphans:
            with contextlib.suppress(StoreUnavailable):
                await self._fail_orphan(response_id, ORPHANED)

    async def _fail_orphan(self, key: str, reason: str) -> None:
        """`key`: the job's name on the board (its tenant's, tenants.scoped)."""
        scope, response_id = unscoped(key)
        responses = attrs.evolve(self._responses, scope=scope)
        record = await responses.get(response_id)
        if record is None or record.response.status in TERMINAL_STATUSES:
            return
        failed = attrs.evolve(record.response, status=Status.FAILED, output=[],
                              error=ResponseError("server_error", reason))
        assert self._board is not None
        events: list[StreamEvent] = [e for _, e in await self._board.events(key)]
        closing = ResponseEvent(
            type="response.failed", response=failed,
            sequence_number=events[-1].sequence_number + 1 if events else 0)
        await responses.put(response_id,
                            record.with_response(failed).with_events([*events, closing]),
                            ephemeral=failed.store is False)
        await self._board.add_event(key, closing)
        log.warning("background response %s failed: %s", key, reason)
