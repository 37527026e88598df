"""The request's `Caller`: told by authentication (app.py), read by every handler that calls
a service. It lives in the request's (or WebSocket's) app context, and is read only through
`caller()`: a handler that reaches for it where authentication did not run (an open path, a
missing hook) is a bug, and fails loudly instead of serving the default tenant."""

from __future__ import annotations

from quart import g

from ..tenants import Caller


def tell(caller: Caller) -> None:
    g.caller = caller


def caller() -> Caller:
    """The caller of the request (or WebSocket) being handled."""
    found = g.get("caller")
    if not isinstance(found, Caller):
        raise RuntimeError("a handler that serves a tenant ran without a caller: "
                           "authentication did not run for its route")
    return found
