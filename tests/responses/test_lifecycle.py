"""The response status machine, as a table, without trio."""

import pytest

from triode.responses.lifecycle import (TERMINAL, TRANSITIONS, Event, Lifecycle, Status,
                                       TransitionError, is_terminal, item_status,
                                       next_status)


def test_happy_paths():
    """queued → in_progress → completed / incomplete."""
    s = next_status(Status.QUEUED, Event.START)
    assert s is Status.IN_PROGRESS
    assert next_status(s, Event.COMPLETE) is Status.COMPLETED
    assert next_status(s, Event.TRUNCATE) is Status.INCOMPLETE


@pytest.mark.parametrize("status", [Status.QUEUED, Status.IN_PROGRESS])
def test_cancel_and_fail_from_any_live_state(status):
    """Both live states can be cancelled or failed."""
    assert next_status(status, Event.CANCEL) is Status.CANCELLED
    assert next_status(status, Event.FAIL) is Status.FAILED


@pytest.mark.parametrize("status", sorted(TERMINAL))
@pytest.mark.parametrize("event", list(Event))
def test_terminal_states_accept_nothing(status, event):
    """A finished response is never rewritten (cancel after completion changes nothing)."""
    assert is_terminal(status)
    with pytest.raises(TransitionError):
        next_status(status, event)


def test_queued_cannot_complete_without_starting():
    """Completion requires a slot first."""
    with pytest.raises(TransitionError):
        next_status(Status.QUEUED, Event.COMPLETE)


def test_every_transition_leads_to_a_known_status():
    """Over every (status, event) pair: the table maps Statuses and Events to Statuses, no
    transition leaves a terminal status, next_status follows the table and raises exactly
    for the pairs it lacks, every status is reachable from queued and every live one can
    reach a terminal one."""
    for (status, event), target in TRANSITIONS.items():
        assert (type(status), type(event), type(target)) == (Status, Event, Status)
        assert status not in TERMINAL, f"{status} is terminal but accepts {event}"
    for status in Status:
        for event in Event:
            if (status, event) in TRANSITIONS:
                assert next_status(status, event) is TRANSITIONS[(status, event)]
            else:
                with pytest.raises(TransitionError):
                    next_status(status, event)
    assert reachable(Status.QUEUED) == set(Status)
    for status in set(Status) - TERMINAL:
        assert reachable(status) & TERMINAL, f"{status} can never end"


def reachable(start: Status) -> set[Status]:
    """The statuses the table leads to from `start`, `start` included."""
    seen, frontier = {start}, [start]
    while frontier:
        status = frontier.pop()
        for (source, _), target in TRANSITIONS.items():
            if source is status and target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def test_a_lifecycle_moves_by_the_table_and_remembers_when():
    life = Lifecycle()
    assert life.status is Status.QUEUED and not life.terminal
    assert life.move(Event.START) is Status.IN_PROGRESS
    assert life.move(Event.TRUNCATE) is Status.INCOMPLETE and life.terminal
    assert [status for status, _ in life.timeline] == \
        [Status.QUEUED, Status.IN_PROGRESS, Status.INCOMPLETE]
    times = [at for _, at in life.timeline]
    assert times == sorted(times)
    with pytest.raises(TransitionError):   # a terminal status takes no event
        life.move(Event.CANCEL)
    assert life.status is Status.INCOMPLETE and len(life.timeline) == 3


def test_an_open_item_completes_only_with_a_completed_response():
    assert item_status(Status.COMPLETED) == "completed"
    for status in TERMINAL - {Status.COMPLETED}:
        assert item_status(status) == "incomplete"
