"""A background job another process runs, followed from this one (service/remote.py): a
shared store that stops answering for a while pauses the follower's stream instead of
breaking it off mid-response; one that stays down past STORE_PATIENCE_SECS ends it."""

from __future__ import annotations

import pytest
import trio

from triode.errors import StoreUnavailable
from triode.responses.lifecycle import Status
from triode.service import remote
from triode.storage.records import StoredResponse

from ..storage.test_records import USER, finished_response


class Board:
    """A job board whose reads fail `failures` times in a row, then serve the events."""

    def __init__(self, events, failures: int):
        self._events = [(f"{i}-0", e) for i, e in enumerate(events)]
        self.failures = failures
        self.reads = 0

    async def events(self, key: str, after: str = "-"):
        self.reads += 1
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("the shared store did not answer in time")
        start = 0 if after == "-" else int(after.split("-")[0]) + 1
        return self._events[start:]

    async def owner(self, key: str):
        return "worker-a"


def job(failures: int):
    obj, events = finished_response()
    record = StoredResponse.of(obj, [USER])
    return remote.RemoteJob(Board([*events, completed(obj)], failures), record)


def completed(obj):
    """The job's terminal event, as its owner would mirror it."""
    import attrs

    from triode.responses.objects import ResponseEvent

    done = attrs.evolve(obj, status=Status.COMPLETED)
    return ResponseEvent(type="response.completed", sequence_number=2, response=done)


async def follow(j):
    seen = []
    async for batch in j.follow_batches():
        seen += [e.type for e in batch]
    return seen


async def test_a_store_that_stops_answering_for_a_while_pauses_the_stream(autojump_clock):
    j = job(failures=5)   # five reads in a row refused, well within the patience
    seen = await follow(j)
    assert seen == ["response.created", "response.in_progress", "response.completed"]
    assert j._board.reads > 5


async def test_a_store_down_past_the_patience_ends_the_stream(autojump_clock, monkeypatch):
    monkeypatch.setattr(remote, "STORE_PATIENCE_SECS", 1.0)
    j = job(failures=10 ** 6)
    with pytest.raises(StoreUnavailable):
        with trio.fail_after(60):
            await follow(j)
