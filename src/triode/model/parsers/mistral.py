"""Mistral tool calls, in either of the two forms Mistral templates use:

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}            (newer; may repeat, with or
                                                                without another [TOOL_CALLS])
    [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]

There is no end marker: a call ends with its JSON. Arguments stream in both forms.
"""

from __future__ import annotations

import re

from triode.model.parsers.base import (WAIT, CallObject, JsonValue, ToolParser,
                                       parse_json_prefix)

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
ARGUMENTS_KEYS = ("arguments",)
FUNCTION_NAME = re.compile(r"[\w.\-]+")


class MistralParser(ToolParser):
    markers = (TOOL_CALLS,)

    def _on_marker(self, marker: str) -> None:
        self._step = self._calls_step

    def _calls_step(self, final: bool) -> bool:
        """After [TOOL_CALLS] or a finished call: a JSON list, `name[ARGS]`, or text again."""
        tag = self._leading_tag((TOOL_CALLS,), final)
        if tag == WAIT:
            return False
        if tag == TOOL_CALLS:
            return True
        if self._buffer.startswith("["):
            self._buffer = self._buffer[1:]
            self._step = self._list_item_step
            return True
        name = FUNCTION_NAME.match(self._buffer)
        if name is not None:
            rest = self._buffer[name.end():]
            if rest.startswith(ARGS):
                self._buffer = rest[len(ARGS):]
                self._start_call(name.group())
                self._step = self._arguments_open_step
                return True
            if ARGS.startswith(rest) and not final:
                return False  # a word after a call is held until it is known not to be a name
        self._back_to_text()
        return True

    def _arguments_open_step(self, final: bool) -> bool:
        self._buffer = self._buffer.lstrip()
        if not self._buffer and not final:
            return False
        if self._buffer.startswith("{"):
            self._arguments = JsonValue()
            self._step = self._arguments_step
        else:
            self._finish_call(self._open_name, {})
            self._step = self._calls_step
        return True

    def _arguments_step(self, final: bool) -> bool:
        consumed = self._arguments.push(self._buffer)
        self._stream_arguments(self._buffer[:consumed])
        self._buffer = self._buffer[consumed:]
        if not (self._arguments.closed or final):
            return False
        arguments, closing = parse_json_prefix(self._arguments.text)
        if closing:
            self._stream_arguments(closing)
        self._finish_call(self._open_name, arguments if isinstance(arguments, dict) else {})
        self._step = self._calls_step
        return True

    def _list_item_step(self, final: bool) -> bool:
        tag = self._leading_tag((",", "]"), final)
        if tag == WAIT:
            return False
        if tag == "]":
            self._step = self._calls_step
        elif tag is None and self._buffer.startswith("{"):
            self._call = CallObject(ARGUMENTS_KEYS)
            self._step = self._list_call_step
        elif tag is None:
            self._back_to_text()  # not a list of calls after all
        return True

    def _list_call_step(self, final: bool) -> bool:
        if not self._follow_call_object(self._call, final):
            return False
        self._step = self._list_item_step
        return True
