"""The request's caller: what authentication tells is what handlers read, and a handler
that runs where authentication did not is an error, never the default tenant."""

from __future__ import annotations

import pytest
from quart_trio import QuartTrio

from triode.http.caller import caller, tell
from triode.tenants import Caller, Limits, Tenant


async def test_a_handler_reads_the_caller_authentication_told() -> None:
    alice = Caller(Tenant("alice", Limits(requests_per_minute=3)))
    async with QuartTrio(__name__).app_context():
        tell(alice)
        assert caller() == alice
        assert caller().key("resp_1") == "alice/resp_1"
        assert caller().owns("alice/resp_1") and not caller().owns("bob/resp_1")


async def test_a_handler_without_a_caller_fails_loudly() -> None:
    async with QuartTrio(__name__).app_context():
        with pytest.raises(RuntimeError, match="without a caller"):
            caller()
