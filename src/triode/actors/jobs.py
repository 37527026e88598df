"""The job board: background jobs shared between the processes of one shared store, on Redis
(`--store redis://`, `RedisBoard` in storage/redis.py) or in the SQLite file
(`--store sqlite:///`, `SqliteBoard` in storage/sqlite.py).

A background job runs on the process that accepted it. The board makes it visible to every
other process on the same store:

* **ownership and lease**: each job names its owning process (Redis `{P}:job:<id>`, SQLite
  table `jobs`); each process keeps its lease alive (Redis `{P}:worker:<its id>`, SQLite
  table `workers`; a heartbeat every WORKER_LEASE_SECS / 3, running out after
  WORKER_LEASE_SECS). The lease holds a token naming the process (`process_token`), so a
  process on the same machine sees at once that an owner has exited, without waiting for its
  lease. A job whose owner is gone is an orphan: the reaper (every process, every
  WORKER_LEASE_SECS / 2, and once at start, `recover`) reports it once (the process that
  releases its job wins), and the service layer stores it as `failed`.
* **events**: the owner mirrors the job's stream events (Redis Stream `{P}:events:<id>`,
  SQLite table `job_events`), so `GET /v1/responses/<id>?stream=true` on any process replays
  and follows it live; they outlive the job by EVENTS_KEEP_SECS.
* **cancel**: `POST .../cancel` on another process asks the owner: Redis publishes the id on
  `{P}:cancel` (the owner is subscribed); SQLite has no notifications, so it sets the job's
  cancel flag and the owner polls for flags every `SqliteBoard.cancel_wait_secs` (0.1 s),
  only while it runs jobs of its own.

The board owns this state and the process's worker id; everything reaches it through
`JobBoardHandle`. Store calls run in worker threads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

import attrs
import trio

from ..responses.objects import StreamEvent, dumps, event_of
from ..errors import StoreUnavailable
from ..storage.backend import Board
from ..storage.values import EVENTS_KEEP_SECS
from .registry import RegistryHandle
from .supervisor import SupervisorHandle

log = logging.getLogger("triode.jobs")

T = TypeVar("T")

# A process's lease on the board: it runs out this long after the last heartbeat, and then
# the jobs the process owned are orphans.
WORKER_LEASE_SECS = 10.0
THREADS = 4


# ---- which process, and whether it still runs ---------------------------------------------


def _machine() -> str:
    """Names this machine and process namespace: two processes with the same name here see
    each other's pids (a container has its own pid namespace, so its own name)."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return "|".join(parts)


def _started(pid: int) -> str | None:
    """A process's start time (Linux: clock ticks since boot), which tells a reused pid from
    the process that had it; None where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else fields[19]   # a zombie has exited


def process_token(pid: int | None = None) -> str:
    """What a lease names: this machine, the pid and its start time, as JSON."""
    pid = os.getpid() if pid is None else pid
    return json.dumps({"machine": _machine(), "pid": pid, "started": _started(pid) or ""})


def process_gone(token: str) -> bool:
    """Whether the process a lease names has certainly exited: it ran on this machine and
    its pid is gone, exited (a zombie) or now another process's. Any doubt (another machine,
    a token of an older triode): False, and its lease decides."""
    try:
        found = json.loads(token)
        machine, pid, started = found["machine"], int(found["pid"]), str(found["started"])
    except (ValueError, TypeError, KeyError):
        return False
    if machine != _machine():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return bool(started) and _started(pid) != started


# ---- the actor ---------------------------------------------------------------------------------


@attrs.frozen
class JobBoardHandle:
    worker_id: str
    _board: Board
    _limiter: trio.CapacityLimiter
    _mirrors: trio.MemorySendChannel[SupervisorHandle]
    orphans: trio.MemoryReceiveChannel[str]
    _lease: float = WORKER_LEASE_SECS
    _running: set[str] = attrs.Factory(set)   # jobs this process claimed, not yet released

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    async def claim(self, response_id: str, owner: str | None = None) -> None:
        """This process owns the job now (`owner`: another's, for tests)."""
        if owner is None:
            self._running.add(response_id)
        await self._call(self._board.claim, response_id, owner or self.worker_id)

    async def mirror(self, handle: SupervisorHandle) -> None:
        """Copies the job's events to the board until it ends, then releases it."""
        await self._mirrors.send(handle)

    async def owner(self, response_id: str) -> str | None:
        """The process running this job, None when no process does (any more)."""
        return await self._call(self._board.owner, response_id)

    async def owner_alive(self, owner: str) -> bool:
        """Whether the owner's lease runs and, on this machine, its process still does."""
        token = await self._call(self._board.worker, owner)
        return token is not None and not process_gone(token)

    async def events(self, response_id: str, after: str = "-"
                     ) -> list[tuple[str, StreamEvent]]:
        """The job's events after stream id `after` ("-": from the start), typed."""
        found = await self._call(self._board.events, response_id, after)
        return [(sid, event_of(json.loads(raw))) for sid, raw in found]

    async def add_event(self, response_id: str, event: StreamEvent) -> None:
        await self._call(self._board.add_events, response_id, [dumps(event).encode()])

    async def request_cancel(self, response_id: str) -> None:
        await self._call(self._board.request_cancel, response_id)

    async def release(self, response_id: str) -> bool:
        """Ends the job's ownership; True for the one caller that ended it."""
        self._running.discard(response_id)
        return await self._call(self._board.release, response_id)

    async def jobs(self) -> list[tuple[str, str | None]]:
        """Every job of the deployment (every process on this store) with its owner's worker
        id (None: released meanwhile), for the live page."""
        return [(response_id, await self.owner(response_id))
                for response_id in await self._call(self._board.jobs)]

    async def orphaned(self) -> list[str]:
        """Releases every job whose owner is gone (its lease ran out, or its process exited
        on this machine) and returns them: each is reported to one caller only."""
        found = []
        for response_id in await self._call(self._board.jobs):
            owner = await self.owner(response_id)
            if owner is not None and (owner == self.worker_id or await self.owner_alive(owner)):
                continue
            if await self.release(response_id):
                found.append(response_id)
        return found


class JobBoard:
    def __init__(self, board: Board, registry: RegistryHandle, *,
                 lease_secs: float = WORKER_LEASE_SECS) -> None:
        self._board = board
        self._registry = registry
        self._lease = lease_secs

    async def run(self, *, task_status: trio.TaskStatus[JobBoardHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        mirrors_send, mirrors = trio.open_memory_channel[SupervisorHandle](64)
        orphans_send, orphans = trio.open_memory_channel[str](64)
        handle = JobBoardHandle(uuid.uuid4().hex, self._board,
                                self._board.limiter or trio.CapacityLimiter(THREADS),
                                mirrors_send, orphans, self._lease)
        token = process_token()
        with contextlib.suppress(StoreUnavailable):   # the heartbeat's loop says why
            await handle._call(self._board.heartbeat, handle.worker_id, token, self._lease)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._heartbeat, handle, token)
            nursery.start_soon(self._listen_for_cancels, handle)
            nursery.start_soon(self._reap, handle, orphans_send)
            task_status.started(handle)
            async for job in mirrors:
                nursery.start_soon(self._mirror, handle, job)

    async def _heartbeat(self, board: JobBoardHandle, token: str) -> None:
        while True:
            try:
                await board._call(self._board.heartbeat, board.worker_id, token, self._lease)
            except StoreUnavailable as exc:
                log.warning("job board heartbeat: %s", exc.message)
            await trio.sleep(self._lease / 3)

    async def _listen_for_cancels(self, board: JobBoardHandle) -> None:
        """Cancels local jobs another process asked to cancel."""
        wait = self._board.cancel_wait_secs
        while True:
            feed = self._board.cancels(board.worker_id)
            try:
                while True:
                    if wait:
                        await trio.sleep(wait)
                        if not board._running:
                            continue         # nothing of ours to cancel: no query
                    for response_id in await board._call(feed.take):
                        await self._registry.cancel(response_id)
            except StoreUnavailable as exc:
                log.warning("job board cancel channel: %s", exc.message)
                await trio.sleep(1.0)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(feed.close)

    async def _reap(self, board: JobBoardHandle, orphans: trio.MemorySendChannel[str]) -> None:
        """Reports each job whose owner is gone, once across all processes."""
        while True:
            await trio.sleep(self._lease / 2)
            try:
                for response_id in await board.orphaned():
                    await orphans.send(response_id)
                await board._call(self._board.tidy, EVENTS_KEEP_SECS)
            except StoreUnavailable as exc:
                log.warning("job board reaper: %s", exc.message)

    async def _mirror(self, board: JobBoardHandle, job: SupervisorHandle) -> None:
        try:
            async for batch in job.follow_batches():
                await board._call(self._board.add_events, job.key,
                                  [dumps(event).encode() for event in batch])
        except StoreUnavailable as exc:
            log.warning("job %s: events not mirrored: %s", job.key, exc.message)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                try:
                    await board.release(job.key)
                except StoreUnavailable:
                    pass

