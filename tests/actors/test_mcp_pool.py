"""The MCP connection pool over a fake opener: one connection per key, shared, closed when
idle (never while leased), reopened after a failure; what it counts."""

from __future__ import annotations

import contextlib

import pytest
import trio

from triode.actors.mcp import ConnectionKey, McpPool


class Opener:
    def __init__(self, fail: bool = False):
        self.opened = 0
        self.closed = 0
        self.fail = fail

    @contextlib.asynccontextmanager
    async def __call__(self):
        self.opened += 1
        if self.fail:
            raise ConnectionError("refused")
        try:
            yield f"session {self.opened}"
        finally:
            self.closed += 1


KEY = ConnectionKey("", "http://h/mcp", "digest1", label="calc")


async def test_one_connection_per_key_shared_and_closed_when_idle(autojump_clock):
    async with trio.open_nursery() as nursery:
        pool = await nursery.start(McpPool(idle=10).run)
        opener = Opener()
        async with pool.session(KEY, opener) as a:
            async with pool.session(KEY, opener) as b:
                assert a == b == "session 1"
        other = ConnectionKey("", "http://h/mcp", "digest2", label="calc")
        async with pool.session(other, opener) as c:
            assert c == "session 2"
        assert (await pool.statistics()).connections == 2
        await trio.sleep(9)
        assert opener.closed == 0
        await trio.sleep(2)
        assert opener.closed == 2 and (await pool.statistics()).connections == 0
        async with pool.session(KEY, opener) as again:
            assert again == "session 3"
        nursery.cancel_scope.cancel()
    assert opener.closed == 3   # the pool's end closes what is open


async def test_a_leased_connection_is_not_closed(autojump_clock):
    async with trio.open_nursery() as nursery:
        pool = await nursery.start(McpPool(idle=1).run)
        opener = Opener()
        async with pool.session(KEY, opener):
            await trio.sleep(60)
            assert opener.closed == 0
        await trio.sleep(2)
        assert opener.closed == 1
        nursery.cancel_scope.cancel()


async def test_a_failed_open_is_raised_and_retried():
    async with trio.open_nursery() as nursery:
        pool = await nursery.start(McpPool(idle=10).run)
        opener = Opener(fail=True)
        for _ in range(2):
            with pytest.raises(ConnectionError):
                async with pool.session(KEY, opener):
                    pass
        assert opener.opened == 2
        nursery.cancel_scope.cancel()


async def test_an_error_in_use_closes_the_session(autojump_clock):
    async with trio.open_nursery() as nursery:
        pool = await nursery.start(McpPool(idle=10).run)
        opener = Opener()
        with pytest.raises(RuntimeError):
            async with pool.session(KEY, opener):
                raise RuntimeError("the stream broke")
        await trio.sleep(0.01)
        assert opener.closed == 1
        async with pool.session(KEY, opener) as fresh:
            assert fresh == "session 2"
        nursery.cancel_scope.cancel()


async def test_figures_per_label():
    async with trio.open_nursery() as nursery:
        pool = await nursery.start(McpPool().run)
        await pool.record("calc", "listing", True)
        await pool.record("calc", "call", True, 0.5)
        await pool.record("calc", "call", False, 0.25)
        await pool.record("other", "listing", False)
        st = await pool.statistics()
        calc, other = st.servers
        assert (calc.label, calc.listings, calc.calls, calc.failures, calc.seconds) == \
            ("calc", 1, 2, 1, 0.75)
        assert (other.listings, other.listing_failures) == (1, 1)
        nursery.cancel_scope.cancel()
