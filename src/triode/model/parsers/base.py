"""Parse events and the machinery the streaming tool-call parsers share.

A parser is fed the assistant turn as decoded text chunks, one per decode step, and turns it
into events as early as it safely can. A marker may arrive split over chunks, so text that
could still grow into one is held back; nothing else is. Whitespace right before or after
tool markup is a separator the chat template adds, so it is held too and then dropped.

Every decision depends only on the text, never on where the chunks were cut: the events may
be sliced differently, but their concatenations are the same for any chunking.

Unfinished and malformed calls (one rule for every format): at finish an open call is closed.
JSON is completed by closing what is open, or else by dropping its unfinished last member;
a call whose name never completed, or whose body is not a call at all, is markup and is
dropped, never shown as text. A call that has announced its name always gets its
`ToolCallDone`, with `{}` if its arguments are unusable.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Union

import attrs


@attrs.frozen
class TextDelta:
    text: str


@attrs.frozen
class ReasoningDelta:
    text: str


@attrs.frozen
class ReasoningDone:
    text: str


@attrs.frozen
class ToolCallStart:
    index: int
    name: str


@attrs.frozen
class ToolCallDelta:
    index: int
    arguments: str


@attrs.frozen
class ToolCallDone:
    index: int
    name: str
    arguments: str


ParseEvent = Union[TextDelta, ReasoningDelta, ReasoningDone, ToolCallStart, ToolCallDelta,
                   ToolCallDone]

# Returned by `ToolParser._leading_tag` while the buffer may still grow into a tag.
WAIT = ""


def canonical_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str) -> Any:
    """`json.loads`, tolerating raw control characters in strings (models emit them) but not
    NaN/Infinity, which would make the canonical re-encoding invalid JSON."""
    return json.loads(text, strict=False, parse_constant=_reject_constant)


def held_marker_length(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that could still grow into one of `markers`."""
    longest = min(len(text), max((len(m) for m in markers), default=1) - 1)
    for length in range(longest, 0, -1):
        tail = text[-length:]
        if any(marker.startswith(tail) for marker in markers):
            return length
    return 0


def first_marker(text: str, markers: tuple[str, ...], start: int = 0) -> tuple[int, str] | None:
    """Position and identity of the earliest of `markers` in `text`, if any."""
    hits = [(at, marker) for marker in markers if (at := text.find(marker, start)) >= 0]
    return min(hits) if hits else None


class JsonScanner:
    """Follows JSON text character by character: inside a string or not, and what is open."""

    def __init__(self) -> None:
        self.in_string = False
        self._escaped = False
        self._closers: list[str] = []

    @property
    def depth(self) -> int:
        return len(self._closers)

    def closing(self) -> str:
        """The brackets that would close everything open (not counting an open string)."""
        return "".join(reversed(self._closers))

    def step(self, char: str) -> None:
        if self.in_string:
            if self._escaped:
                self._escaped = False
            elif char == "\\":
                self._escaped = True
            elif char == '"':
                self.in_string = False
        elif char == '"':
            self.in_string = True
        elif char in "{[":
            self._closers.append("}" if char == "{" else "]")
        elif char in "}]" and self._closers:
            self._closers.pop()


def parse_json_prefix(text: str) -> tuple[Any, str | None]:
    """Parses JSON text that may have been cut off.

    Returns the value and the suffix that completed the text as it stands ("" if it was
    complete), or None as the suffix when the unfinished last member had to be dropped
    (and None as the value when nothing parses).
    """
    scanner = JsonScanner()
    cuts: list[tuple[int, str]] = []  # (end, closers): where the text can be cut and closed
    for at, char in enumerate(text):
        structural = not scanner.in_string
        scanner.step(char)
        if structural and char in "{[":
            cuts.append((at + 1, scanner.closing()))
        elif structural and char == ",":
            cuts.append((at, scanner.closing()))
    closing = ('"' if scanner.in_string else "") + scanner.closing()
    try:
        return loads(text + closing), closing
    except ValueError:
        pass
    for end, closers in reversed(cuts):
        try:
            return loads(text[:end] + closers), None
        except ValueError:
            continue
    return None, None


class JsonValue:
    """One JSON object followed as it is generated, from its opening `{` to its closing `}`."""

    def __init__(self) -> None:
        self._scanner = JsonScanner()
        self._raw: list[str] = []
        self.closed = False

    @property
    def text(self) -> str:
        return "".join(self._raw)

    def push(self, text: str) -> int:
        """Consumes `text` up to the end of the value; returns how much it consumed."""
        for at, char in enumerate(text):
            self._scanner.step(char)
            self._raw.append(char)
            if self._scanner.depth == 0 and not self._scanner.in_string:
                self.closed = True
                return at + 1
        return len(text)


class CallObject:
    """A `{"name": ..., "arguments": {...}}` object followed as it is generated.

    It learns the name as soon as the name's string closes, and forwards the raw text of the
    arguments object while it is generated. Arguments are forwarded only when the name came
    first (a start event needs the name) and only when they are an object (a JSON-encoded
    string is decoded at the end, so its raw text is not the final arguments).
    """

    def __init__(self, arguments_keys: tuple[str, ...]) -> None:
        self.arguments_keys = arguments_keys
        self._scanner = JsonScanner()
        self._raw: list[str] = []
        self._awaiting_key = True
        self._key: str | None = None  # the top-level member being read
        self._string_start = 0  # where the top-level string being read began in _raw
        self.first_key: str | None = None
        self.keyless = False  # a member did not open with a string key: not a call object
        self.name: str | None = None
        self.streaming = False
        self.closed = False

    @property
    def text(self) -> str:
        return "".join(self._raw)

    def push(self, text: str) -> tuple[int, str]:
        """Consumes `text` up to the end of the object (which must open with its first
        character); returns how much it consumed and the arguments text to forward."""
        forwarded: list[str] = []
        scanner = self._scanner
        for at, char in enumerate(text):
            depth, was_in_string = scanner.depth, scanner.in_string
            scanner.step(char)
            self._raw.append(char)
            if depth == 1 and was_in_string and not scanner.in_string:
                self._top_string_closed()
            elif depth == 1 and not was_in_string:
                self._top_structure(char)
            if self.streaming:
                forwarded.append(char)
                self.streaming = scanner.depth > 1
            if depth == 1 and scanner.depth == 0:
                self.closed = True
                return at + 1, "".join(forwarded)
        return len(text), "".join(forwarded)

    def _top_structure(self, char: str) -> None:
        if char == '"':
            self._string_start = len(self._raw) - 1
        elif char == ":":
            self._awaiting_key = False
        elif char == ",":
            self._awaiting_key, self._key = True, None
        elif self._awaiting_key:
            if not char.isspace() and char != "}":
                self.keyless = True
        elif char == "{" and self._key in self.arguments_keys and self.name is not None:
            self.streaming = True

    def _top_string_closed(self) -> None:
        try:
            value = loads("".join(self._raw[self._string_start:]))
        except ValueError:
            return
        if self._awaiting_key:
            self._key = value
            if self.first_key is None:
                self.first_key = value
        elif self._key == "name" and self.name is None:
            self.name = value


def call_name(value: Any) -> str | None:
    name = value.get("name") if isinstance(value, dict) else None
    return name if isinstance(name, str) else None


def call_arguments(value: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The arguments object of a parsed call; a JSON-encoded string is decoded (some templates
    render arguments that way), and anything unusable becomes `{}`."""
    if not isinstance(value, dict):
        return {}
    arguments: Any = next((value[key] for key in keys if key in value), {})
    if isinstance(arguments, str):
        try:
            arguments = loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


Step = Callable[[bool], bool]


class StepMachine:
    """An incremental parser as a set of step methods, one per mode; `_step` is the current
    one. A step consumes what it can from `_buffer` and returns True to run the (possibly
    new) current step again, False to wait for more text. With `final` set (at finish) a
    step must not wait: it closes whatever is open. Subclasses set `_buffer`, `_events` and
    `_step` in their constructor."""

    _buffer: str
    _events: list[ParseEvent]
    _step: Step

    def feed(self, chunk: str) -> list[ParseEvent]:
        self._buffer += chunk
        while self._step(False):
            pass
        return self._take_events()

    def finish(self) -> list[ParseEvent]:
        while self._step(True):
            pass
        return self._take_events()

    def _take_events(self) -> list[ParseEvent]:
        events, self._events = self._events, []
        return events


class ToolParser(StepMachine):
    """Text with tool calls in it, parsed incrementally (see StepMachine)."""

    markers: tuple[str, ...] = ()  # markup that ends plain text
    block_end = ""  # the marker that closes a tool-call block, for formats that have one

    def __init__(self) -> None:
        self._buffer = ""
        self._events: list[ParseEvent] = []
        self._separator = False  # leading whitespace here separates markup, it is not text
        self._next_index = 0
        self._open_index: int | None = None
        self._open_name = ""
        self._step: Step = self._text_step


    def _on_marker(self, marker: str) -> None:
        """Called when plain text meets one of `markers`: sets the next step."""
        raise NotImplementedError

    def _text_step(self, final: bool) -> bool:
        buffer = self._buffer
        if self._separator:
            buffer = buffer.lstrip()
            self._separator = not buffer
        found = first_marker(buffer, self.markers)
        if found is not None:
            at, marker = found
            self._emit_text(buffer[:at].rstrip())
            self._buffer = buffer[at + len(marker):]
            self._on_marker(marker)
            return True
        if final:
            ready = buffer
        else:
            ready = buffer[:len(buffer) - held_marker_length(buffer, self.markers)]
            if self.markers:
                ready = ready.rstrip()
        self._emit_text(ready)
        self._buffer = buffer[len(ready):]
        return False

    def _skip_block_step(self, final: bool) -> bool:
        """Drops a block that holds no parsable call, through its end marker."""
        at = self._buffer.find(self.block_end)
        if at < 0:
            held = held_marker_length(self._buffer, (self.block_end,))
            self._buffer = "" if final else self._buffer[len(self._buffer) - held:]
            return False
        self._buffer = self._buffer[at + len(self.block_end):]
        self._back_to_text()
        return True

    def _back_to_text(self) -> None:
        self._separator = True
        self._step = self._text_step

    def _leading_tag(self, tags: tuple[str, ...], final: bool) -> str | None:
        """Consumes leading whitespace and the tag the buffer then starts with, and returns
        the tag; WAIT while the buffer could still grow into one, None when it cannot."""
        self._buffer = self._buffer.lstrip()
        for tag in tags:
            if self._buffer.startswith(tag):
                self._buffer = self._buffer[len(tag):]
                return tag
        if any(tag.startswith(self._buffer) for tag in tags):
            if not final:
                return WAIT
            self._buffer = ""  # a tag cut off at finish is still markup
        return None

    def _emit_text(self, text: str) -> None:
        if text:
            self._events.append(TextDelta(text))

    def _start_call(self, name: str) -> None:
        if self._open_index is None:
            self._open_index, self._open_name = self._next_index, name
            self._next_index += 1
            self._events.append(ToolCallStart(self._open_index, name))

    def _stream_arguments(self, text: str) -> None:
        if text and self._open_index is not None:
            self._events.append(ToolCallDelta(self._open_index, text))

    def _finish_call(self, name: str, arguments: dict[str, Any]) -> None:
        self._start_call(name)
        assert self._open_index is not None
        self._events.append(ToolCallDone(self._open_index, self._open_name,
                                         canonical_json(arguments)))
        self._open_index = None

    def _follow_call_object(self, call: CallObject, final: bool) -> bool:
        """Feeds the buffer to a JSON call object; True once the call is over."""
        consumed, arguments = call.push(self._buffer)
        self._buffer = self._buffer[consumed:]
        if call.name is not None:
            self._start_call(call.name)
        self._stream_arguments(arguments)
        if not (call.closed or final):
            return False
        value, closing = parse_json_prefix(call.text)
        if call.streaming and closing:
            self._stream_arguments(closing[:-1])  # all but the `}` of the call object itself
        name = call.name if call.name is not None else call_name(value)
        if name is not None:
            self._finish_call(name, call_arguments(value, call.arguments_keys))
        return True
