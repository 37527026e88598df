"""From decoded text to output items: the parser's events, mapped onto the request's tools.

Pure (no trio): the supervisor feeds it one step's text at a time. Custom tools are shown to
the template as functions with one `input` string (responses/items.py), so a call to one comes back
as a `custom_tool_call` with that raw input; a custom call whose arguments are not
`{"input": str}`, or a call to a tool the request did not declare, comes back as a plain
`function_call` with the original arguments, so the client can report the error and go on.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from ..model.parsers import (ReasoningDelta, ReasoningDone, TextDelta, ToolCallDelta,
                             ToolCallDone, ToolCallStart)
from . import codec
from .builder import ResponseBuilder
from .objects import McpCallItem

ENCRYPTED_REASONING_VERSION = 1


def encrypt_reasoning(text: str) -> str:
    """A self-describing base64url blob of the reasoning text (not encrypted: client data)."""
    return codec.encode({"triode": "reasoning", "v": ENCRYPTED_REASONING_VERSION, "text": text})


def decrypt_reasoning(blob: str) -> str | None:
    """The reasoning text of a blob `encrypt_reasoning` made; None for anything else."""
    try:
        obj = codec.decode(blob)
    except (ValueError, TypeError):
        return None
    if not isinstance(obj, dict) or obj.get("triode") != "reasoning" \
            or not isinstance(text := obj.get("text"), str):
        return None
    return text


class OutputAssembler:
    def __init__(self, builder: ResponseBuilder, parser: Any, *,
                 resolve: Callable[[str], tuple[str, str, str | None] | None],
                 allow_calls: bool = True, parallel: bool = True, max_calls: int | None = None,
                 encrypted_reasoning: bool = False, starts_in_reasoning: bool = False,
                 needs_approval: Callable[[str, str], bool] | None = None):
        """`resolve(chat_name)` gives (kind, name, namespace) of a declared tool, or None;
        kind `mcp` is an MCP server's tool (its namespace the server's label), whose call
        is an `mcp_call` the supervisor runs, or an `mcp_approval_request` when
        `needs_approval(label, name)`. `max_calls` (the request's `max_tool_calls`, less
        the calls this response made before): the calls past it are dropped."""
        self._builder = builder
        self._parser = parser
        self._resolve = resolve
        self._allow_calls = allow_calls
        caps = [cap for cap in (None if parallel else 1, max_calls) if cap is not None]
        self._max_calls = min(caps, default=None)
        self._encrypted = encrypted_reasoning
        self._reasoning_open = starts_in_reasoning
        self._calls = 0
        self._dropped: set[int] = set()
        self._deferred: set[int] = set()      # custom calls: emitted whole when done
        self._needs_approval = needs_approval or (lambda label, name: True)
        self._approvals: dict[int, tuple[str, str]] = {}   # calls that wait: (label, name)
        self._mcp: dict[int, McpCallItem] = {}
        self.reasoning_tokens = 0
        self.call_count = 0
        self.mcp_ready: list[McpCallItem] = []   # MCP calls whose arguments are done
        self.approval_requests = 0
        self.client_calls = 0                    # function and custom calls for the client
        self._logprobs: list[dict[str, Any]] = []   # entries waiting for the text they made

    def feed(self, text: str, logprobs: dict[str, Any] | None = None) -> None:
        """One decode step's text (one token) and, if asked for, its logprob entry."""
        if logprobs is not None:
            self._logprobs.append(logprobs)
        was_open = self._reasoning_open
        reasoned = self._apply(self._parser.feed(text))
        if was_open or reasoned:
            self.reasoning_tokens += 1

    def finish(self) -> None:
        self._apply(self._parser.finish())

    def _apply(self, events: list[Any]) -> bool:
        reasoned = False
        b = self._builder
        for ev in events:
            match ev:
                case TextDelta(text=t):
                    b.text(t, self._logprobs)
                    self._logprobs = []
                case ReasoningDelta(text=t):
                    self._logprobs = []   # logprobs describe output_text only
                    reasoned = True
                    self._reasoning_open = True
                    b.reasoning(t)
                case ReasoningDone(text=t):
                    self._reasoning_open = False
                    b.reasoning_done(t, encrypt_reasoning(t) if self._encrypted else None)
                case ToolCallStart(index=i, name=name):
                    self._logprobs = []
                    self._start(i, name)
                case ToolCallDelta(index=i, arguments=delta):
                    if i not in self._dropped and i not in self._deferred \
                            and i not in self._approvals and delta:
                        b.call_delta(i, delta)
                case ToolCallDone(index=i, name=name, arguments=arguments):
                    self._done(i, name, arguments)
        return reasoned

    def _start(self, index: int, chat_name: str) -> None:
        if not self._allow_calls or (self._max_calls is not None
                                     and self.call_count >= self._max_calls):
            # tool_choice none, parallel_tool_calls false (one call), max_tool_calls
            self._dropped.add(index)
            return
        self.call_count += 1
        tool = self._resolve(chat_name)
        if tool is not None and tool[0] == "mcp":
            _, name, label = tool
            assert label is not None   # an MCP tool's namespace is its server's label
            if self._needs_approval(label, name):
                self._approvals[index] = (label, name)
            else:
                self._mcp[index] = self._builder.mcp_call_start(index, label=label, name=name)
            return
        self.client_calls += 1
        if tool is not None and tool[0] == "custom":
            self._deferred.add(index)
            return
        kind, name, namespace = tool if tool is not None else ("function", chat_name, None)
        self._builder.call_start(index, kind=kind, name=name, namespace=namespace)

    def _done(self, index: int, chat_name: str, arguments: str) -> None:
        if index in self._dropped:
            return
        if index in self._approvals:
            label, name = self._approvals.pop(index)
            self._builder.mcp_approval_request(label=label, name=name, arguments=arguments)
            self.approval_requests += 1
            return
        if index in self._mcp:
            self._builder.call_done(index, arguments)
            self.mcp_ready.append(self._mcp.pop(index))
            return
        if index not in self._deferred:
            self._builder.call_done(index, arguments)
            return
        tool = self._resolve(chat_name)
        assert tool is not None   # deferred: it resolved to a custom tool at its start
        _, name, namespace = tool
        raw = _custom_input(arguments)
        if raw is None:   # malformed custom arguments: a plain function call, as generated
            self._builder.call_start(index, kind="function", name=name, namespace=namespace)
            self._builder.call_done(index, arguments)
        else:
            self._builder.call_start(index, kind="custom", name=name, namespace=namespace)
            self._builder.call_done(index, raw)


def _custom_input(arguments: str) -> str | None:
    try:
        obj = json.loads(arguments)
    except ValueError:
        return None
    if isinstance(obj, dict) and set(obj) == {"input"} and isinstance(obj["input"], str):
        return obj["input"]
    return None


class StopMatcher:
    """Text-level stop sequences: holds back only what could still become a stop sequence;
    on a match, everything before it is the end of the output."""

    def __init__(self, stops: list[str]):
        self._stops = stops
        self._hold = max((len(s) for s in stops), default=1) - 1
        self._buffer = ""
        self.matched: str | None = None   # the stop sequence that ended the output

    def feed(self, text: str) -> tuple[str, bool]:
        """(text that is safe to emit, whether a stop sequence was reached)."""
        if not self._stops:
            return text, False   # the per-token path of every request without stops
        self._buffer += text
        hits = [(i, s) for s in self._stops if (i := self._buffer.find(s)) >= 0]
        if hits:
            at, self.matched = min(hits)
            out, self._buffer = self._buffer[:at], ""
            return out, True
        cut = max(0, len(self._buffer) - self._hold)
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return out, False

    def flush(self) -> str:
        out, self._buffer = self._buffer, ""
        return out
