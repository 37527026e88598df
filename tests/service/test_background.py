"""Jobs: unfinished responses refused as previous_response_id and for delete, cancel's
answer, and the reaper failing an orphaned job (on Redis and on SQLite), at start too."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio

from triode.responses.objects import plain

from triode.actors.jobs import JobBoard
from triode.storage.redis import RedisBoard
from triode.storage.sqlite import SqliteBoard
from triode.storage.records import StoredResponse
from triode.storage.sqlite_database import Database
from triode.actors.registry import Registry
from triode.errors import InvalidRequest, NotFound
from triode.responses.builder import ResponseBuilder
from triode.responses.lifecycle import Status
from triode.service.background import ORPHANED, RESTARTED

from ..conftest import REDIS_URL
from .conftest import CALLER, FakeModel, record_json, request, start_service, statuses, until


async def held_job(nursery, **fields):
    """A service and a background job of it that has started generating and waits."""
    model = FakeModel(reply="one two three")
    model.hold = trio.Event()
    service = await start_service(nursery, model=model)
    started = await service.turns.create(CALLER, request(background=True, **fields))
    await until(lambda: started.handle.status == "in_progress")
    return service, started.handle


async def test_previous_response_id_naming_a_running_job_is_refused(nursery, clock):
    """Continuing a job that is still running is a 400 with its live status (in_progress,
    while its stored record still says queued)."""
    service, job = await held_job(nursery)
    with pytest.raises(InvalidRequest) as refused:
        await service.turns.create(CALLER, request(previous_response_id=job.response_id))
    assert refused.value.message == (
        f"previous response '{job.response_id}' has not finished (status: in_progress)")
    assert refused.value.param == "previous_response_id"


async def test_deleting_a_running_background_job_is_refused(nursery, clock):
    """DELETE of an unfinished background job is a 400 asking for a cancel; the job stays
    stored."""
    service, job = await held_job(nursery)
    with pytest.raises(InvalidRequest) as refused:
        await service.turns.delete(CALLER, job.response_id)
    assert refused.value.status == 400
    assert refused.value.message.endswith("(status: in_progress); cancel it before deleting it")
    stored = record_json(await service.turns.stored(CALLER, job.response_id))
    assert stored["response"]["status"] == "queued"


async def test_cancel_answers_with_the_stored_cancelled_job(nursery, clock):
    """Cancelling a background job returns exactly what a poll then reads: the stored,
    cancelled object."""
    service, job = await held_job(nursery)
    answer = plain(await service.turns.cancel(CALLER, job.response_id))
    assert answer["status"] == "cancelled"
    assert answer == record_json(await service.turns.stored(CALLER, job.response_id))["response"]
    assert await service.turns.live(CALLER, job.response_id) is None


async def test_cancel_of_an_unstored_response_answers_with_its_final_object(nursery, clock):
    """A foreground `store: false` response has nothing stored: cancel answers with the
    cancelled object itself."""
    model = FakeModel(reply="one two three")
    model.hold = trio.Event()
    service = await start_service(nursery, model=model)
    started = await service.turns.create(CALLER, request(store=False))
    await until(lambda: started.handle.status == "in_progress")
    response_id = started.handle.response_id
    assert await service.turns.live(CALLER, response_id) is None   # nothing to poll meanwhile
    answer = plain(await service.turns.cancel(CALLER, response_id))
    assert answer["id"] == response_id
    assert answer["status"] == "cancelled" and answer["store"] is False
    with pytest.raises(NotFound):
        await service.turns.stored(CALLER, response_id)


@pytest.fixture(params=["redis", "sqlite"])
def shared_board(request, tmp_path):
    """A job board's state on the test Redis (a fresh prefix) or in a fresh SQLite file."""
    if request.param == "sqlite":
        db = Database(str(tmp_path / "board.db"))
        db.open()
        yield SqliteBoard(db, "t")
        db.close()
        return
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    yield RedisBoard(client, request.getfixturevalue("redis_prefix"))
    client.close()


async def test_the_reaper_stores_an_orphaned_job_as_failed(nursery, shared_board):
    """A job whose owning process's lease is gone is stored as `failed` with the orphan
    error, and its event stream gets the closing response.failed."""
    async with trio.open_nursery() as board_nursery:   # ends before the client closes
        registry = await board_nursery.start(Registry().run)   # where its cancels go
        board = await board_nursery.start(JobBoard(shared_board, registry,
                                                   lease_secs=0.2).run)
        service = await start_service(nursery, board=board)
        plan, _ = await service.preparer().prepare(CALLER, request(background=True))
        builder = ResponseBuilder("resp_orphan", plan.echo, background=True)
        builder.created()
        builder.enter(Status.IN_PROGRESS)
        await service.responses.put("resp_orphan", StoredResponse.of(builder.obj, []),
                                    pinned=True)
        for event in builder.events:
            await board.add_event("resp_orphan", event)
        await board_nursery.start(service.turns.reap)   # past its start: leases decide
        await board.claim("resp_orphan", owner="a-process-that-stopped")
        with trio.fail_after(10):   # the reaper stores the record, then mirrors the event
            while record_json(await service.responses.get("resp_orphan"))["response"][
                    "status"] \
                    != "failed" or len(await board.events("resp_orphan")) < 3:
                await trio.sleep(0.05)
        record = record_json(await service.turns.stored(CALLER, "resp_orphan"))
        assert record["response"]["output"] == []
        assert record["response"]["error"] == {"code": "server_error",
                                               "message": ORPHANED}
        stored_events = await service.turns.stored_events(CALLER, "resp_orphan", -1)
        assert statuses(stored_events) == ["response.created", "response.in_progress",
                                           "response.failed"]
        assert stored_events[-1].sequence_number == 2
        mirrored = [e for _, e in await board.events("resp_orphan")]
        assert mirrored == stored_events
        assert await board.owner("resp_orphan") is None
        board_nursery.cancel_scope.cancel()


async def test_jobs_a_restart_interrupted_are_failed_before_reap_starts(nursery,
                                                                      shared_board):
    """At start, a job whose owner was a process of this machine that has exited is stored
    failed, with the restart message, before `reap` reports started (before the server
    answers), without waiting for the owner's lease to run out."""
    from triode.actors.jobs import process_token

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    async with trio.open_nursery() as board_nursery:
        registry = await board_nursery.start(Registry().run)
        board = await board_nursery.start(JobBoard(shared_board, registry).run)
        service = await start_service(nursery, board=board)
        plan, _ = await service.preparer().prepare(CALLER, request(background=True))
        builder = ResponseBuilder("resp_cut", plan.echo, background=True)
        builder.created()
        await service.responses.put("resp_cut", StoredResponse.of(builder.obj, []), pinned=True)
        await trio.to_thread.run_sync(shared_board.heartbeat, "old-process",
                                      process_token(dead.pid), 60.0)   # its lease runs on
        await board.claim("resp_cut", owner="old-process")
        await board_nursery.start(service.turns.reap)
        record = record_json(await service.turns.stored(CALLER, "resp_cut"))
        assert record["response"]["status"] == "failed"
        assert record["response"]["error"] == {"code": "server_error", "message": RESTARTED}
        board_nursery.cancel_scope.cancel()
