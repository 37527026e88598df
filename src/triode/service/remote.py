"""A background job another process on the same shared store runs, as this process reads
it: its stored record, then the events its owner mirrors to the job board.

The turn service follows one as it follows a local supervisor (`Jobs.find_live`: a GET, a
stream, a cancel's wait); the live page (`http/ui.py`) shows the other processes' jobs with
the status, token count and timeline read the same way.
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator, Awaitable, Callable

import attrs
import trio

from ..actors.jobs import JobBoardHandle
from ..errors import StoreUnavailable
from ..responses.lifecycle import TERMINAL_EVENTS, TERMINAL_STATUSES, Status, is_terminal
from ..responses.objects import ResponseEvent, ResponseObject, StreamEvent, usage
from ..storage.records import StoredResponse

# How often a follower on another process looks for new events of a remote job.
FOLLOW_POLL_SECS = 0.1
# How long a follower rides out a shared store that does not answer (a Redis call gives up
# after 2 s: a busy server, a failover) before its stream or wait gives up too.
STORE_PATIENCE_SECS = 30.0

Reread = Callable[[], Awaitable["StoredResponse | None"]]


class RemoteJob:
    """A background job another process runs. Its events come from the job board (a Redis
    Stream, or SQLite's job_events, polled every FOLLOW_POLL_SECS); it is done at a
    terminal event, or when its owner released it and the stored record is terminal (a
    cancel has no event), or when the reaper failed it (a response.failed).

    `status`, `deltas` and `timeline` say what this reader has seen: the status its events
    reached (queued until one says otherwise), the delta events (about one per generated
    token) and when each status was first seen (queued: at the job's creation)."""

    def __init__(self, board: JobBoardHandle, record: StoredResponse, *,
                 key: str | None = None, reread: Reread | None = None,
                 keep_events: bool = True) -> None:
        """`key`: its name on the board (default: its id); `reread`: the stored record
        again, to see a cancel's end; `keep_events`: keep what was read, for followers."""
        self.record = record
        obj = record.response
        self.response_id: str = obj.id
        self.key = key or self.response_id
        self.status = Status.QUEUED
        self.deltas = 0
        self.timeline: list[list[Any]] = [[self.status, float(obj.created_at or time.time())]]
        self._board = board
        self._reread = reread
        self._keep_events = keep_events
        self._events: list[StreamEvent] = []
        self._last = "-"
        self._started = False
        self._final: ResponseObject | None = None

    @property
    def background(self) -> bool:
        return bool(self.record.response.background)

    @property
    def store(self) -> bool:
        return bool(self.record.response.store)

    @property
    def done(self) -> bool:
        return self._final is not None

    def polled(self) -> ResponseObject:
        """As SupervisorHandle.polled: the status only, no partial output."""
        obj = self.record.response
        return attrs.evolve(obj, status=Status.IN_PROGRESS if self._started else obj.status,
                            output=[], usage=usage())

    async def read_on(self) -> list[StreamEvent]:
        """Reads the board's events after those already read; returns the new ones."""
        found = await self._board.events(self.key, self._last)
        if found:
            self._last = found[-1][0]
        more = [event for _, event in found]
        for event in more:
            self._see(event)
        if self._keep_events:
            self._events += more
        return more

    def _see(self, event: StreamEvent) -> None:
        if event.type.endswith(".delta"):
            self.deltas += 1
        if not isinstance(event, ResponseEvent):
            return
        if event.type == "response.in_progress":
            self._started = True
            if self.status == Status.QUEUED:
                self._stamp(Status.IN_PROGRESS)
        elif is_terminal(event.response.status):
            self._stamp(event.response.status)
        if event.type in TERMINAL_EVENTS and self._final is None:
            self._final = event.response

    def _stamp(self, status: Status) -> None:
        self.status = status
        self.timeline.append([status, time.time()])

    async def _poll(self) -> None:
        await self.read_on()
        if self._final is not None or self._reread is None:
            return
        if await self._board.owner(self.key) is None:
            record = await self._reread()
            if record is not None and record.response.status in TERMINAL_STATUSES:
                # The owner appends its last events before it lets go: read once more, or
                # a terminal event appended since the read above would never be followed.
                await self.read_on()
                if self._final is None:
                    self._final = record.response

    async def _poll_patiently(self) -> None:
        """`_poll`, through a store that does not answer for up to STORE_PATIENCE_SECS: a
        follower's stream then pauses instead of breaking off mid-response."""
        deadline: float | None = None
        while True:
            try:
                await self._poll()
                return
            except StoreUnavailable:
                now = trio.current_time()
                deadline = now + STORE_PATIENCE_SECS if deadline is None else deadline
                if now >= deadline:
                    raise
                await trio.sleep(FOLLOW_POLL_SECS)

    async def wait(self) -> ResponseObject:
        while self._final is None:
            await trio.sleep(FOLLOW_POLL_SECS)
            await self._poll_patiently()
        return self._final

    async def follow_batches(self, starting_after: int = -1
                             ) -> AsyncIterator[list[StreamEvent]]:
        sent = starting_after
        while True:
            batch = [e for e in self._events if e.sequence_number > sent]
            if batch:
                sent = batch[-1].sequence_number
                yield batch
            if self._final is not None:
                return
            await trio.sleep(FOLLOW_POLL_SECS)
            await self._poll_patiently()
