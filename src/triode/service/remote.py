"""Live responses as the HTTP layer reads them: a local supervisor's handle, or a background
job running in another process on the same shared store (`RemoteJob`, read through the job
board: its stored record, its mirrored events, its owner's lease)."""

from __future__ import annotations

from typing import Any, AsyncIterator, Protocol

import trio

from ..actors.jobs import JobBoardHandle
from ..responses.ids import usage

# How often a follower on another process looks for new events of a remote job.
FOLLOW_POLL_SECS = 0.1
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
ORPHANED = ("the server process running this background response stopped (its lease "
            "expired) before the response finished")


class LiveResponse(Protocol):
    """What a reader of a running response uses (SupervisorHandle and RemoteJob)."""

    response_id: str

    @property
    def done(self) -> bool: ...

    @property
    def background(self) -> bool: ...

    def polled(self) -> dict[str, Any]: ...

    async def wait(self) -> dict[str, Any]: ...

    def follow_batches(self, starting_after: int = -1
                       ) -> AsyncIterator[list[dict[str, Any]]]: ...


class RemoteJob:
    """A background job another process runs. Its events come from the job's Redis Stream;
    it is done at a terminal event, or when its owner released it and the stored record is
    terminal (a cancel has no event), or when the reaper failed it (a response.failed)."""

    background = True

    def __init__(self, board: JobBoardHandle, record: dict[str, Any],
                 events: list[tuple[str, dict[str, Any]]], reread: Any) -> None:
        self.response_id: str = record["response"]["id"]
        self._board = board
        self._record = record
        self._events = [e for _, e in events]
        self._last = events[-1][0] if events else "-"
        self._reread = reread              # async () -> the stored record or None
        self._final: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self._final is not None

    def polled(self) -> dict[str, Any]:
        """As SupervisorHandle.polled: the status only, no partial output."""
        obj = self._record["response"]
        started = any(e["type"] == "response.in_progress" for e in self._events)
        return {**obj, "status": "in_progress" if started else obj["status"], "output": [],
                "usage": usage()}

    async def _poll(self) -> None:
        more = await self._board.events(self.response_id, self._last)
        if more:
            self._last = more[-1][0]
            self._events += [e for _, e in more]
        for event in self._events:
            if event["type"] in TERMINAL_EVENTS:
                self._final = event["response"]
                return
        if await self._board.owner(self.response_id) is None:
            record = await self._reread()
            if record is not None and record["response"]["status"] in TERMINAL_STATUSES:
                self._final = record["response"]

    async def wait(self) -> dict[str, Any]:
        while self._final is None:
            await trio.sleep(FOLLOW_POLL_SECS)
            await self._poll()
        return self._final

    async def follow_batches(self, starting_after: int = -1
                             ) -> AsyncIterator[list[dict[str, Any]]]:
        sent = starting_after
        while True:
            batch = [e for e in self._events if e["sequence_number"] > sent]
            if batch:
                sent = batch[-1]["sequence_number"]
                yield batch
            if self._final is not None:
                return
            await trio.sleep(FOLLOW_POLL_SECS)
            await self._poll()
