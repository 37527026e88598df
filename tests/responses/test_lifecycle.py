"""The response status machine, as a table, without trio."""

import pytest

from triode.responses.lifecycle import (TERMINAL, TRANSITIONS, Event, Status, TransitionError,
                                     is_terminal, next_status)


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
    """The table is closed over Status."""
    assert all(isinstance(v, Status) for v in TRANSITIONS.values())
