"""The job board: background jobs shared between processes on one Redis (`--store redis://`).

A background job runs on the process that accepted it. The board makes it visible to every
other process on the same store:

* **ownership and lease**: `{P}:job:<id>` names the owning process; each process keeps
  `{P}:worker:<its id>` alive (a heartbeat every LEASE_SECS / 3, expiring after LEASE_SECS).
  A job whose owner's heartbeat is gone is an orphan: the reaper (every process, every
  LEASE_SECS / 2) reports it once (the process that deletes its job key wins), and the
  service layer stores it as `failed`.
* **events**: the owner mirrors the job's stream events into the Redis Stream
  `{P}:events:<id>`, so `GET /v1/responses/<id>?stream=true` on any process replays and
  follows it live; the stream outlives the job by EVENTS_KEEP_SECS.
* **cancel**: `POST .../cancel` on another process publishes the id on `{P}:cancel`; the owner
  (subscribed) cancels the job in its registry.

The board owns this Redis state and the process's worker id; everything reaches it through
`JobBoardHandle`. Redis calls run in worker threads (redis-py's sync client).
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any, Callable

import attrs
import trio

from ..responses.objects import AnyEvent, dumps
from ..errors import StoreUnavailable
from .registry import RegistryHandle
from .supervisor import SupervisorHandle

log = logging.getLogger("triode.jobs")

LEASE_SECS = 10.0
EVENTS_KEEP_SECS = 600.0
THREADS = 4
LISTEN_POLL_SECS = 0.5


@attrs.frozen
class JobBoardHandle:
    worker_id: str
    _client: Any
    _prefix: str
    _limiter: trio.CapacityLimiter
    _mirrors: trio.MemorySendChannel[SupervisorHandle]
    orphans: trio.MemoryReceiveChannel[str]

    def key(self, kind: str, name: str = "") -> str:
        return f"{{{self._prefix}}}:{kind}" + (f":{name}" if name else "")

    async def _redis(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(_guarded, fn, *args, limiter=self._limiter)

    async def claim(self, response_id: str) -> None:
        """This process owns the job now."""
        pipe = self._client.pipeline()
        pipe.set(self.key("job", response_id), self.worker_id)
        pipe.sadd(self.key("jobs"), response_id)
        await self._redis(pipe.execute)

    async def mirror(self, handle: SupervisorHandle) -> None:
        """Copies the job's events into its Redis Stream until it ends, then releases it."""
        await self._mirrors.send(handle)

    async def owner(self, response_id: str) -> str | None:
        """The process running this job, None when no process does (any more)."""
        found = await self._redis(self._client.get, self.key("job", response_id))
        return None if found is None else bytes(found).decode()

    async def owner_alive(self, owner: str) -> bool:
        return bool(await self._redis(self._client.exists, self.key("worker", owner)))

    async def events(self, response_id: str, after: str = "-") -> list[tuple[str, Any]]:
        """The job's events after stream id `after` ("-": from the start)."""
        start = after if after == "-" else "(" + after
        found = await self._redis(self._client.xrange, self.key("events", response_id), start)
        return [(bytes(sid).decode(), json.loads(fields[b"e"])) for sid, fields in found]

    async def add_event(self, response_id: str, event: AnyEvent) -> None:
        stream = self.key("events", response_id)
        pipe = self._client.pipeline()
        pipe.xadd(stream, {"e": dumps(event)})
        pipe.expire(stream, int(EVENTS_KEEP_SECS))
        await self._redis(pipe.execute)

    async def request_cancel(self, response_id: str) -> None:
        await self._redis(self._client.publish, self.key("cancel"), response_id)

    async def release(self, response_id: str) -> bool:
        """Ends the job's ownership; True for the one caller that ended it."""
        pipe = self._client.pipeline()
        pipe.delete(self.key("job", response_id))
        pipe.srem(self.key("jobs"), response_id)
        deleted, _ = await self._redis(pipe.execute)
        return bool(deleted)


def _guarded(fn: Callable[..., Any], *args: Any) -> Any:
    from redis.exceptions import ConnectionError, TimeoutError

    try:
        return fn(*args)
    except (ConnectionError, TimeoutError) as exc:
        raise StoreUnavailable(f"the store (Redis) is unreachable: {exc}") from None


class JobBoard:
    def __init__(self, client: Any, prefix: str, registry: RegistryHandle, *,
                 lease_secs: float = LEASE_SECS) -> None:
        self._client = client
        self._prefix = prefix
        self._registry = registry
        self._lease = lease_secs

    async def run(self, *, task_status: trio.TaskStatus[JobBoardHandle] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        mirrors_send, mirrors = trio.open_memory_channel[SupervisorHandle](64)
        orphans_send, orphans = trio.open_memory_channel[str](64)
        handle = JobBoardHandle(uuid.uuid4().hex, self._client, self._prefix,
                                trio.CapacityLimiter(THREADS), mirrors_send, orphans)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._heartbeat, handle)
            nursery.start_soon(self._listen_for_cancels, handle)
            nursery.start_soon(self._reap, handle, orphans_send)
            task_status.started(handle)
            async for job in mirrors:
                nursery.start_soon(self._mirror, handle, job)

    async def _heartbeat(self, board: JobBoardHandle) -> None:
        key = board.key("worker", board.worker_id)
        while True:
            try:
                await board._redis(self._client.set, key, b"1", None, int(self._lease * 1000))
            except StoreUnavailable as exc:
                log.warning("job board heartbeat: %s", exc.message)
            await trio.sleep(self._lease / 3)

    async def _listen_for_cancels(self, board: JobBoardHandle) -> None:
        """Cancels local jobs named on the cancel channel (by another process's cancel)."""
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await board._redis(pubsub.subscribe, board.key("cancel"))
                while True:
                    msg = await board._redis(pubsub.get_message, True, LISTEN_POLL_SECS)
                    if msg is not None and msg.get("type") == "message":
                        await self._registry.cancel(bytes(msg["data"]).decode())
            except StoreUnavailable as exc:
                log.warning("job board cancel channel: %s", exc.message)
                await trio.sleep(1.0)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(pubsub.close)

    async def _reap(self, board: JobBoardHandle, orphans: trio.MemorySendChannel[str]) -> None:
        """Reports each job whose owner's lease ran out, once across all processes."""
        while True:
            await trio.sleep(self._lease / 2)
            try:
                for raw in await board._redis(self._client.smembers, board.key("jobs")):
                    response_id = bytes(raw).decode()
                    owner = await board.owner(response_id)
                    if owner is not None and await board.owner_alive(owner):
                        continue
                    if await board.release(response_id):
                        await orphans.send(response_id)
            except StoreUnavailable as exc:
                log.warning("job board reaper: %s", exc.message)

    async def _mirror(self, board: JobBoardHandle, job: SupervisorHandle) -> None:
        try:
            async for batch in job.follow_batches():
                stream = board.key("events", job.response_id)
                pipe = self._client.pipeline()
                for event in batch:
                    pipe.xadd(stream, {"e": dumps(event)})
                pipe.expire(stream, int(EVENTS_KEEP_SECS))
                await board._redis(pipe.execute)
        except StoreUnavailable as exc:
            log.warning("job %s: events not mirrored: %s", job.response_id, exc.message)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                try:
                    await board.release(job.response_id)
                except StoreUnavailable:
                    pass
