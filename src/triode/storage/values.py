"""What every backend answers with, and the figures their policies share: the modules of
each technology (memory.py, redis.py, sqlite*.py) import these, backend.py names the
contract over them."""

from __future__ import annotations

from typing import Literal

import attrs

Values = list[bytes]
StoreKind = Literal["memory", "redis", "sqlite"]

# A tenant's counting window (requests, output tokens) lasts this long from its first count.
WINDOW_SECS = 60.0
# A concurrency ticket (one response in flight) lapses this long after its last renewal, so
# a process that died gives its tickets back; the limits actor renews every third of it.
TICKET_LEASE_SECS = 30.0
# A job's events outlive it this long on the board (the Redis Stream's expiry; the SQLite
# board forgets them as long after their last one).
EVENTS_KEEP_SECS = 600.0


class StoreOpenError(Exception):
    """The store cannot be opened at startup; the message says why, in a few words."""


@attrs.frozen
class Window:
    """A window's state after an operation: whether it admitted, its count, seconds until
    it closes."""

    admitted: bool
    count: int
    reset_in: float
