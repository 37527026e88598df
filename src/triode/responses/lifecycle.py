"""The response status machine as a pure table (no trio), after h11's `_state.py`.

    queued ──start──▶ in_progress ──finish──▶ completed | incomplete
       │                   │
       ├──cancel──▶ cancelled ◀──cancel──┤
       └──fail────▶ failed ◀────fail─────┘

Terminal states accept no event: a cancel that arrives after completion leaves the response
as it is (the cancel endpoint returns it unchanged).
"""

from __future__ import annotations

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
