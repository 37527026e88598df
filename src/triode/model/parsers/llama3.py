"""Llama 3 JSON tool calls: the output itself is the call, optionally after <|python_tag|>,
and several calls are separated by `;`:

    {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": ...}

There is no start marker, so a `{` opening the output (or following the tag) is only taken
for a call once its first key is known to be "name" or "type"; any other JSON is text. An
answer that is itself a JSON object opening with "name" is read as a call: the format
cannot tell the two apart.
"""

from __future__ import annotations

from triode.model.parsers.base import CallObject, ToolParser

PYTHON_TAG = "<|python_tag|>"
ARGUMENTS_KEYS = ("parameters", "arguments")
CALL_FIRST_KEYS = ("name", "type")


class Llama3Parser(ToolParser):
    markers = (PYTHON_TAG,)

    def __init__(self) -> None:
        super().__init__()
        self._step = self._call_position_step

    def _on_marker(self, marker: str) -> None:
        self._step = self._call_position_step

    def _call_position_step(self, final: bool) -> bool:
        """Where a call may begin: the start of the output, after the tag or after a call."""
        body = self._buffer.lstrip()
        if not body and not final:
            return False
        if not body.startswith("{"):
            self._step = self._text_step
            return True
        self._leading_space = self._buffer[:len(self._buffer) - len(body)]
        self._buffer = body
        self._call = CallObject(ARGUMENTS_KEYS)
        self._step = self._candidate_step
        return True

    def _candidate_step(self, final: bool) -> bool:
        """Reads a `{` one character at a time until its first key tells whether it is a call."""
        call = self._call
        while self._buffer and call.first_key is None and not (call.keyless or call.closed):
            call.push(self._buffer[0])
            self._buffer = self._buffer[1:]
        if call.first_key in CALL_FIRST_KEYS:
            self._step = self._call_step
            return True
        if call.first_key is None and not (call.keyless or call.closed or final):
            return False
        self._emit_text(self._leading_space + call.text)
        self._step = self._text_step
        return True

    def _call_step(self, final: bool) -> bool:
        if not self._follow_call_object(self._call, final):
            return False
        self._step = self._between_calls_step
        return True

    def _between_calls_step(self, final: bool) -> bool:
        self._buffer = self._buffer.lstrip()
        if self._buffer.startswith(";"):
            self._buffer = self._buffer[1:]
            return True
        if not self._buffer and not final:
            return False
        if self._buffer.startswith("{"):
            self._step = self._call_position_step
        else:
            self._back_to_text()
        return True
