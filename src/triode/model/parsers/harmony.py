"""The harmony format's output (gpt-oss), parsed as it streams.

Generation starts right after the prompt's `<|start|>assistant`, so the first message's header
has no role: `<|channel|>analysis<|message|>...<|end|>`, then `<|start|>assistant<|channel|>
final<|message|>...<|return|>`, or a call `<|start|>assistant<|channel|>commentary
to=functions.NAME <|constrain|>json<|message|>{...}<|call|>` (the recipient may also stand in
the role part: `assistant to=functions.NAME<|channel|>commentary ...`).

- `analysis` → reasoning (consecutive analysis messages are one reasoning item);
- a message with a recipient → a tool call, its arguments streamed as they are generated;
- `final`, `commentary` without a recipient (a preamble), or no channel → text.

Markup never reaches the text: every harmony special token is consumed, and a marker that
interrupts a message ends it (`<|start|>`, `<|channel|>`: the model skipped its `<|end|>`).
Messages from other roles (a model writing a tool's answer itself) are dropped. Output that
never opens a header (a model that ignores the format) is text. The rule of `base` for
unfinished and malformed calls holds: a call that named its recipient always ends with a
`ToolCallDone`, with `{}` if its arguments are unusable.
"""

from __future__ import annotations

import re

from ..harmony import CALL, CHANNEL, CONSTRAIN, END, MESSAGE, RETURN, START, tool_name
from .base import (ParseEvent, ReasoningDelta, ReasoningDone, TextDelta, ToolCallDelta,
                   ToolCallDone, ToolCallStart, canonical_json, loads, parse_json_prefix)

# Every special token of gpt-oss's vocabulary (o200k_harmony): the structural ones above, and
# others that never belong in text.
_OTHER = ("<|startoftext|>", "<|endoftext|>", "<|refusal|>", "<|untrusted|>",
          "<|end_untrusted|>", "<|meta_end|>")
_KNOWN = (START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL, *_OTHER)
_MARKER = re.compile("|".join(re.escape(m) for m in _KNOWN) + r"|<\|reserved_\d+\|>")
_RESERVED_PREFIX = re.compile(r"<\|reserved_\d*\|?")
_MESSAGE_ENDS = (END, RETURN, CALL)
# A header is a few words; text that runs longer without a `<|message|>` is not one.
HEADER_LIMIT = 128

_HEADER, _CONTENT, _BETWEEN = "header", "content", "between"
_REASONING, _TEXT, _CALL, _DROP = "reasoning", "text", "call", "drop"


def _held(buffer: str) -> int:
    """Length of the tail of `buffer` that may still grow into a special token."""
    at = buffer.rfind("<", max(0, len(buffer) - 24))
    if at < 0:
        return 0
    tail = buffer[at:]
    if any(m.startswith(tail) for m in (*_KNOWN, "<|reserved_")) \
            or _RESERVED_PREFIX.fullmatch(tail):
        return len(tail)
    return 0


class HarmonyParser:
    """One assistant turn in harmony; `feed` decoded text as it comes, then `finish`."""

    def __init__(self) -> None:
        self._buffer = ""
        self._events: list[ParseEvent] = []
        self._mode = _HEADER
        self._header = ""
        self._role_given = False      # the header starts with a role (after <|start|>)
        self._kind = _DROP
        self._reasoning: list[str] = []   # the reasoning item open across analysis messages
        self._calls = 0
        self._call_name = ""
        self._arguments: list[str] = []

    def feed(self, chunk: str) -> list[ParseEvent]:
        self._buffer += chunk
        self._run(final=False)
        return self._take()

    def finish(self) -> list[ParseEvent]:
        self._run(final=True)
        if self._mode == _HEADER:
            self._unfinished_header()
        elif self._mode == _CONTENT:
            self._close_message()
        self._close_reasoning()
        return self._take()

    def _take(self) -> list[ParseEvent]:
        events, self._events = self._events, []
        return events

    # ---- scanning -----------------------------------------------------------------------

    def _run(self, *, final: bool) -> None:
        while True:
            found = _MARKER.search(self._buffer)
            if found is None:
                keep = 0 if final else _held(self._buffer)
                ready = self._buffer[:len(self._buffer) - keep]
                self._buffer = self._buffer[len(ready):]
                self._on_text(ready)
                return
            self._on_text(self._buffer[:found.start()])
            self._buffer = self._buffer[found.end():]
            self._on_marker(found.group())

    def _on_text(self, text: str) -> None:
        if not text:
            return
        if self._mode == _CONTENT:
            self._content(text)
        elif self._mode == _HEADER:
            self._header += text
            if not self._role_given and not self._header_may_open():
                self._header_was_text()
            elif len(_MARKER.sub("", self._header)) > HEADER_LIMIT:
                self._header_was_text()
        # between messages, text outside any message is nothing

    def _on_marker(self, marker: str) -> None:
        if self._mode == _HEADER:
            if marker == MESSAGE:
                self._open_message()
            elif marker in (CHANNEL, CONSTRAIN):
                self._header += marker
            elif marker == START:   # a header that never reached <|message|>: markup
                self._begin_header(role_given=True)
            elif marker in _MESSAGE_ENDS:
                self._mode = _BETWEEN
            return
        if self._mode == _CONTENT:
            if marker in (MESSAGE, CONSTRAIN) or marker not in (*_MESSAGE_ENDS, START, CHANNEL):
                return   # stray markup inside content: consumed, never text
            self._close_message()
            self._mode = _BETWEEN
        # between messages (or a message just ended by a marker that opens the next one)
        if marker == START:
            self._begin_header(role_given=True)
        elif marker == CHANNEL:   # `<|start|>assistant` left out: the header goes on
            self._begin_header(role_given=False)
            self._header = CHANNEL
        elif marker == MESSAGE:   # a message with no header at all
            self._begin_header(role_given=False)
            self._open_message()

    # ---- headers --------------------------------------------------------------------------

    def _begin_header(self, *, role_given: bool) -> None:
        self._mode, self._header, self._role_given = _HEADER, "", role_given

    def _header_may_open(self) -> bool:
        """The first message's header (no role) is markup from its first character, or a
        recipient (`to=...`); any other text means the model is not writing harmony."""
        head = self._header.lstrip()
        return not head or head.startswith(CHANNEL) or head.startswith("to=") \
            or "to=".startswith(head) or head.startswith(CONSTRAIN)

    def _header_was_text(self) -> None:
        """No header after all: what was taken for one is the text of a message."""
        text = _MARKER.sub("", self._header)
        self._mode, self._kind, self._header = _CONTENT, _TEXT, ""
        self._content(text)

    def _unfinished_header(self) -> None:
        """At the end, a header that never reached `<|message|>` is dropped as markup unless
        it is plain text the model wrote instead of harmony."""
        if not self._role_given and CHANNEL not in self._header \
                and not self._header.lstrip().startswith("to="):
            self._header_was_text()
            self._close_message()

    def _open_message(self) -> None:
        role, channel, to = parse_header(self._header, role_given=self._role_given)
        self._mode, self._header = _CONTENT, ""
        if role != "assistant":
            self._kind = _DROP
        elif to is not None:
            self._kind = _CALL
            self._close_reasoning()
            self._call_name, self._arguments = tool_name(to), []
            self._events.append(ToolCallStart(self._calls, self._call_name))
        elif channel == "analysis":
            self._kind = _REASONING
        else:
            self._kind = _TEXT
            self._close_reasoning()

    # ---- content --------------------------------------------------------------------------

    def _content(self, text: str) -> None:
        if not text:
            return
        if self._kind == _REASONING:
            self._reasoning.append(text)
            self._events.append(ReasoningDelta(text))
        elif self._kind == _TEXT:
            self._events.append(TextDelta(text))
        elif self._kind == _CALL:
            self._arguments.append(text)
            self._events.append(ToolCallDelta(self._calls, text))

    def _close_message(self) -> None:
        if self._kind == _CALL:
            self._events.append(ToolCallDone(self._calls, self._call_name,
                                             call_arguments("".join(self._arguments))))
            self._calls += 1
        self._kind = _DROP

    def _close_reasoning(self) -> None:
        if self._reasoning:
            self._events.append(ReasoningDone("".join(self._reasoning)))
            self._reasoning = []


def parse_header(header: str, *, role_given: bool) -> tuple[str, str | None, str | None]:
    """(role, channel, recipient) of a message header: `assistant to=functions.f<|channel|>
    commentary <|constrain|>json`, or without the role for the first message generated."""
    channel = None
    at = header.find(CHANNEL)
    if at >= 0:
        after = header[at + len(CHANNEL):]
        word = re.match(r"[^\s<]*", after)
        assert word is not None   # the pattern matches the empty string
        channel = word.group() or None
        header = header[:at] + " " + after[word.end():]
    words = header.replace(CHANNEL, " ").replace(CONSTRAIN, f" {CONSTRAIN}").split()
    role = "assistant"
    if role_given:
        role = words.pop(0) if words else ""
        if role.startswith("assistant:"):   # a named author: assistant:NAME
            role = "assistant"
    to = next((w[3:] for w in words if w.startswith("to=") and len(w) > 3), None)
    return role, channel, None if to in (None, "all") else to


def call_arguments(raw: str) -> str:
    """A call's final arguments: its JSON object re-encoded canonically; JSON cut off is
    completed as `base.parse_json_prefix` does; anything unusable is `{}`."""
    text = raw.strip()
    try:
        value = loads(text)
    except ValueError:
        value, _ = parse_json_prefix(text)
    return canonical_json(value if isinstance(value, dict) else {})
