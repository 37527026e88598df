"""The response status machine as a pure table (no trio), after h11's `_state.py`, and
`Lifecycle`, the one owner of a response's status: it moves by the table and keeps when
each status was entered. The supervisor holds a response's; the `ResponseBuilder` renders
each status it is told to enter and never picks one.

    queued ──start──▶ in_progress ──finish──▶ completed | incomplete
       │                   │
       ├──cancel──▶ cancelled ◀──cancel──┤
       └──fail────▶ failed ◀────fail─────┘

Terminal states accept no event: a cancel that arrives after completion leaves the response
as it is (the cancel endpoint returns it unchanged).
"""

from __future__ import annotations

import time
from enum import Enum


class Status(str, Enum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Event(str, Enum):
    START = "start"          # a generation slot took the request
    COMPLETE = "complete"    # the model stopped by itself
    TRUNCATE = "truncate"    # the token limit stopped it
    FAIL = "fail"
    CANCEL = "cancel"


TERMINAL = frozenset({Status.COMPLETED, Status.INCOMPLETE, Status.FAILED, Status.CANCELLED})
# The same, as the `status` strings of stored and streamed objects.
TERMINAL_STATUSES = frozenset(status.value for status in TERMINAL)
# The ends a turn keeps: it has output that extends a chain, a conversation or an echo.
FINISHED_STATUSES = frozenset({Status.COMPLETED.value, Status.INCOMPLETE.value})
# The stream events that end a response's stream (a cancel has none: docs/cancellation.md).
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})

TRANSITIONS: dict[tuple[Status, Event], Status] = {
    (Status.QUEUED, Event.START): Status.IN_PROGRESS,
    (Status.QUEUED, Event.FAIL): Status.FAILED,
    (Status.QUEUED, Event.CANCEL): Status.CANCELLED,
    (Status.IN_PROGRESS, Event.COMPLETE): Status.COMPLETED,
    (Status.IN_PROGRESS, Event.TRUNCATE): Status.INCOMPLETE,
    (Status.IN_PROGRESS, Event.FAIL): Status.FAILED,
    (Status.IN_PROGRESS, Event.CANCEL): Status.CANCELLED,
}


class TransitionError(Exception):
    pass


def next_status(status: Status, event: Event) -> Status:
    try:
        return TRANSITIONS[(status, event)]
    except KeyError:
        raise TransitionError(f"cannot {event.value} a response that is {status.value}") from None


def is_terminal(status: Status) -> bool:
    return status in TERMINAL


def item_status(status: Status) -> str:
    """The status an output item still open takes when its response ends in `status`:
    `completed` with a completed response, else `incomplete`."""
    return Status.COMPLETED.value if status is Status.COMPLETED else Status.INCOMPLETE.value


class Lifecycle:
    """One response's status: `move` takes an event through the table (TransitionError
    for one the table has no row for) and returns the status entered. `timeline`: each
    status with the wall-clock time it was entered."""

    def __init__(self) -> None:
        self.status = Status.QUEUED
        self.timeline: list[tuple[Status, float]] = [(Status.QUEUED, time.time())]

    def move(self, event: Event) -> Status:
        self.status = next_status(self.status, event)
        self.timeline.append((self.status, time.time()))
        return self.status

    @property
    def terminal(self) -> bool:
        return is_terminal(self.status)
