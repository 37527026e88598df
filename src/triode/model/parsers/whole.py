"""The tool-call formats whose calls come out whole: every format mlx-lm parses
(`mlx_lm.tool_parsers`) that triode has no streaming parser of its own for.

The text between the format's start and end markers (mlx-lm's `tool_call_start` /
`tool_call_end`) is held, as mlx-lm's server holds it, and handed to mlx-lm's own
`parse_tool_call(text, tools)` once the end marker arrives (or the turn ends); each call it
returns becomes a `ToolCallStart` and a `ToolCallDone` with the whole arguments. Nothing of
the block is ever shown as text.

A block cut off at the end of the turn (the token limit) is completed the way the format
would have closed it (`REPAIRS`) before it is parsed; when no parse accepts it, a call whose
name can be read still gets its `ToolCallDone` with `{}` (the rule in `base`), and a block
without even that is dropped with a warning in the log.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import pkgutil
import re
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

import attrs

from triode.model.parsers.base import ToolParser, held_marker_length, loads, parse_json_prefix

log = logging.getLogger(__name__)

Repair = Callable[[str], list[str]]


def suffixes(*endings: str) -> Repair:
    """Completes a cut-off block by appending each of `endings` in turn."""
    return lambda body: [body + ending for ending in endings]


def json_after(marker: str, end: str, *endings: str) -> Repair:
    """Completes a block whose last part is JSON after `marker`: the JSON closed as
    `base.parse_json_prefix` closes it, then `end`; else each of `endings`."""
    def repair(body: str) -> list[str]:
        out = []
        head, found, tail = body.rpartition(marker)
        if found and end not in tail:
            value, _ = parse_json_prefix(tail)
            if value is not None:
                out.append(head + marker + json.dumps(value, ensure_ascii=False) + end)
        return out + [body + ending for ending in endings]
    return repair


GEMMA4_QUOTE = '<|"|>'


def gemma4_repair(body: str) -> list[str]:
    """Closes what a cut-off Gemma 4 call left open: its `<|"|>` string, then its brackets;
    or else drops its unfinished last member."""
    closers: list[str] = []
    in_string = False
    cuts: list[tuple[int, str]] = []   # after each `{`, `[` or before each `,`: closed there
    at = 0
    while at < len(body):
        if body.startswith(GEMMA4_QUOTE, at):
            in_string = not in_string
            at += len(GEMMA4_QUOTE)
            continue
        char = body[at]
        if not in_string:
            if char in "{[":
                closers.append("}" if char == "{" else "]")
                cuts.append((at + 1, "".join(reversed(closers))))
            elif char in "}]" and closers:
                closers.pop()
            elif char == ",":
                cuts.append((at, "".join(reversed(closers))))
        at += 1
    closed = body + (GEMMA4_QUOTE if in_string else "") + "".join(reversed(closers))
    return [closed, *(body[:end] + close for end, close in reversed(cuts))]


def pythonic_repair(body: str) -> list[str]:
    """Closes what a cut-off Python call list left open: its string, then its brackets; or
    else drops the unfinished last keyword."""
    closers: list[str] = []
    quote = ""
    cuts: list[tuple[int, str]] = []
    escaped = False
    for at, char in enumerate(body):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            closers.append({"(": ")", "[": "]", "{": "}"}[char])
        elif char in ")]}" and closers:
            closers.pop()
        elif char == ",":
            cuts.append((at, "".join(reversed(closers))))
    closed = body + quote + "".join(reversed(closers))
    return [closed, *(body[:end] + close for end, close in reversed(cuts))]


NAME = re.compile(r"[\w.\-]+")


@attrs.frozen
class Details:
    """What triode adds to an mlx-lm format: how a block cut off at finish is completed, and
    how a call's name is read when nothing parses."""

    repair: Repair = suffixes()
    name: str | None = None      # a regex whose first group is the call's name
    dropped: tuple[str, ...] = ()   # markup around the reply, never text


REPAIRS: dict[str, Details] = {
    "glm47": Details(suffixes("</arg_value>"), r"^\s*([\w.\-]+)\s*(?:<|$)"),
    "laguna": Details(suffixes("</arg_value>"), r"^\s*([\w.\-]+)\s*(?:<|$)"),
    "longcat": Details(suffixes("</longcat_arg_value>"), r"^\s*([\w.\-]+)\s*(?:<|$)"),
    "kimi_k2": Details(json_after("<|tool_call_argument_begin|>", "<|tool_call_end|>",
                                  "<|tool_call_end|>"),
                       r"<\|tool_call_begin\|>\s*(?:functions\.)?([^:<\s]+)"),
    # Kimi K3's reply sits in a response block (mlx-lm's `_infer_structural_markers`).
    "kimi_k3": Details(json_after("<|sep|>", "<|close|>json<|sep|><|close|>call<|sep|>",
                                  "<|close|>argument<|sep|><|close|>call<|sep|>",
                                  "<|close|>call<|sep|>"), r'tool="([^"]+)"',
                       ("<|open|>response<|sep|>", "<|close|>response<|sep|>",
                        "<|close|>message<|sep|>")),
    "minimax_m2": Details(suffixes("</parameter>\n</invoke>", "\n</invoke>"),
                          r'<invoke name="?([^">\s]+)'),
    "minicpm5": Details(suffixes("</param>"), r'^\s*["\']?([^"\'\s>]+)'),
    "muse_spark": Details(json_after('">', "</atem:parameter>", "</atem:parameter>"),
                          r'<atem:invoke\b[^>]*?\bname="([^"]+)"'),
    "gemma4": Details(gemma4_repair, r"call:([\w-]+)"),
    "function_gemma": Details(suffixes("}", "<escape>}"), r"call:(\w+)"),
    "pythonic": Details(pythonic_repair, r"\[\s*([\w.]+)\("),
}


@functools.cache
def mlx_format_names() -> tuple[str, ...]:
    """Every tool-call format the installed mlx-lm has a parser module for."""
    import mlx_lm.tool_parsers

    return tuple(sorted(m.name for m in pkgutil.iter_modules(mlx_lm.tool_parsers.__path__)))


@functools.cache
def mlx_module(name: str) -> ModuleType:
    return importlib.import_module(f"mlx_lm.tool_parsers.{name}")


class WholeCallParser(ToolParser):
    """Calls in the mlx-lm format `name`, each emitted when its block is complete."""

    def __init__(self, name: str, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        super().__init__()
        module = mlx_module(name)
        self._name = name
        self._parse: Callable[..., Any] = module.parse_tool_call
        self._start: str = module.tool_call_start
        self._end: str = module.tool_call_end
        self._tools = [dict(t) for t in tools] if tools else None
        self._details = REPAIRS.get(name, Details())
        self.markers = (self._start, *self._details.dropped)
        self._scanned = 0

    def _on_marker(self, marker: str) -> None:
        if marker != self._start:
            self._back_to_text()   # structural markup: dropped with its separators
            return
        self._scanned = 0
        self._step = self._block_step

    def _block_step(self, final: bool) -> bool:
        end = self._end
        start = max(0, self._scanned - len(end) + 1)
        at = self._buffer.find(end, start) if end else -1
        if at < 0 and not final:
            self._scanned = len(self._buffer)
            return False
        if at >= 0:
            body, self._buffer = self._buffer[:at], self._buffer[at + len(end):]
        else:   # the turn ended inside the block; an end marker cut off is markup too
            body = self._buffer[:len(self._buffer) - held_marker_length(self._buffer, (end,))]
            self._buffer = ""
        for name, arguments in self._calls(body, complete=at >= 0):
            self._finish_call(name, arguments)
        self._back_to_text()
        return True

    def _calls(self, body: str, *, complete: bool) -> list[tuple[str, dict[str, Any]]]:
        if not body.strip():
            return []
        attempts = [body] if complete else [*self._details.repair(body), body]
        cut = body.rfind("<")
        if not complete and cut > 0 and ">" not in body[cut:]:   # a tag cut off in its name
            attempts[-1:-1] = self._details.repair(body[:cut])
        for text in attempts:
            try:
                parsed = self._parse(text, self._tools)
            except Exception:   # mlx-lm's parsers raise whatever their regexes lead to
                continue
            calls = normalized(parsed)
            if calls:
                return calls
        name = self._salvaged_name(body)
        log.warning("a %s tool call did not parse%s: %r", self._name,
                    f"; kept as a call to {name} with no arguments" if name else "; dropped",
                    body[:200])
        return [(name, {})] if name else []

    def _salvaged_name(self, body: str) -> str | None:
        if self._details.name is None:
            return None
        match = re.search(self._details.name, body)
        return match.group(1) if match and NAME.fullmatch(match.group(1)) else None


def normalized(parsed: Any) -> list[tuple[str, dict[str, Any]]]:
    """mlx-lm's parse (one call or a list of calls) as (name, arguments object) pairs."""
    calls = []
    for call in parsed if isinstance(parsed, list) else [parsed]:
        name = call.get("name") if isinstance(call, dict) else None
        if not isinstance(name, str) or not NAME.fullmatch(name.strip()):
            continue   # not a name: a parser's fallback read markup or prose as one
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = loads(arguments)
            except ValueError:
                arguments = {}
        calls.append((name.strip(), jsonable(arguments)))
    return calls


def jsonable(arguments: Any) -> dict[str, Any]:
    """An arguments object that is plain JSON: a parser's Python literals (tuples, sets) made
    JSON, anything that has no JSON form (NaN, infinity) making the arguments unusable."""
    if not isinstance(arguments, dict):
        return {}
    try:
        value = loads(json.dumps(arguments, ensure_ascii=False, allow_nan=False, default=str))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
