"""The request/reply plumbing every actor shares.

A request message carries a one-shot reply channel; the actor answers with an
`outcome.Value` or `outcome.Error`, and the caller unwraps it. The caller owns the receive
side, so an actor never blocks on a caller that went away.
"""

from __future__ import annotations

from typing import Callable, TypeAlias, TypeVar

import outcome
import trio

T = TypeVar("T")
M = TypeVar("M")

# The one-shot channel a request's answer comes back on: ReplyChannel[the answer's type].
ReplyChannel: TypeAlias = "trio.MemorySendChannel[outcome.Outcome[T]]"


async def ask(inbox: trio.MemorySendChannel[M], make: Callable[[ReplyChannel[T]], M]) -> T:
    """Sends `make(reply_channel)` to an actor and waits for its answer."""
    reply_send, reply_recv = trio.open_memory_channel[outcome.Outcome[T]](1)
    await inbox.send(make(reply_send))
    async with reply_recv:
        result = await reply_recv.receive()
    return result.unwrap()


def answer(reply: ReplyChannel[T], fn: Callable[[], T]) -> None:
    """Runs `fn` and sends its outcome (value or exception) back on `reply`."""
    reply_with(reply, outcome.capture(fn))


def reply_with(reply: ReplyChannel[T], result: outcome.Outcome[T]) -> None:
    """Sends a ready outcome (e.g. `outcome.Error(exc)`) on a one-shot reply channel."""
    with reply:
        try:
            reply.send_nowait(result)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
            pass  # the caller was cancelled and closed its side; nobody to tell
