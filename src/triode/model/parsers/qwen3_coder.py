"""Qwen3-Coder XML tool calls:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A call the model starts without its `<tool_call>` opener (a bare `<function=...>`, as
Qwen3-Coder models sometimes write) is still a call: `<function=` cannot be anything else.

Parameter values are text; one that reads as a JSON number, boolean, null, array or object
is taken as that value, unless the tool's schema types the parameter as a string (as
mlx-lm's parser does), which keeps `007` a string. The arguments stream as JSON built here, a member at a time (the key
when its parameter opens, the value when it closes), and the deltas concatenate to exactly
the final arguments.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from triode.model.parsers.base import (WAIT, ToolParser, canonical_json, first_marker,
                                       held_marker_length, loads)

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"
FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"
# The model sometimes leaves out </parameter>; the next tag then ends the value.
VALUE_ENDS = (PARAMETER_CLOSE, PARAMETER_OPEN, FUNCTION_CLOSE)
LONGEST_VALUE_END = max(len(end) for end in VALUE_ENDS)


def parameter_value(text: str, string: bool = False) -> Any:
    """The value of a parameter's text (the template puts it between newlines); `string`:
    the schema says it is a string, so it is taken as written."""
    text = text.removeprefix("\n").removesuffix("\n")
    if string:
        return text
    try:
        value = loads(text)
    except ValueError:
        return text
    return text if isinstance(value, str) else value


def is_text(schema: Any) -> bool:
    """A parameter whose value is taken as written: its schema's type is `string` (or a list
    of types with `string` in it)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def string_parameters(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, set[str]]:
    """Tool name → the parameters whose values are text (`is_text`); tools as the chat
    template gets them: `{"type": "function", "function": {"name", "parameters"}}`."""
    out: dict[str, set[str]] = {}
    for tool in tools or ():
        function = tool.get("function", tool)
        properties = (function.get("parameters") or {}).get("properties") or {}
        out[str(function.get("name"))] = {key for key, schema in properties.items()
                                          if is_text(schema)}
    return out


class Qwen3CoderParser(ToolParser):
    markers = (CALL_START, CALL_END, FUNCTION_OPEN)
    block_end = CALL_END

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        super().__init__()
        self._strings = string_parameters(tools)

    def _on_marker(self, marker: str) -> None:
        if marker == CALL_START:
            self._step = self._block_open_step
        elif marker == FUNCTION_OPEN:
            self._step = self._name_step   # a call without its <tool_call> opener
        else:
            self._back_to_text()  # a stray closer is markup all the same

    def _block_open_step(self, final: bool) -> bool:
        tag = self._leading_tag((FUNCTION_OPEN,), final)
        if tag == WAIT:
            return False
        self._step = self._name_step if tag == FUNCTION_OPEN else self._skip_block_step
        return True

    def _name_step(self, final: bool) -> bool:
        end = self._buffer.find(">")
        if end < 0:
            if final:
                self._buffer = ""  # a name cut off at finish: the call is dropped
            return False
        name = self._buffer[:end].strip()
        self._buffer = self._buffer[end + 1:]
        if not name:
            self._step = self._skip_block_step
            return True
        self._start_call(name)
        self._arguments: dict[str, Any] = {}
        self._step = self._parameters_step
        return True

    def _parameters_step(self, final: bool) -> bool:
        tag = self._leading_tag((PARAMETER_OPEN, FUNCTION_CLOSE), final)
        if tag == WAIT:
            return False
        if tag == PARAMETER_OPEN:
            self._step = self._parameter_name_step
            return True
        if tag is None and not final:
            # Stray text between parameters belongs to no value: skip to the next tag.
            next_tag = self._buffer.find("<", 1)
            self._buffer = self._buffer[next_tag:] if next_tag > 0 else ""
            return True
        if tag is None:
            self._buffer = ""  # at finish, what is left inside the function is markup
        self._stream_arguments("}" if self._arguments else "{}")
        self._finish_call(self._open_name, self._arguments)
        self._step = self._after_function_step
        return True

    def _parameter_name_step(self, final: bool) -> bool:
        end = self._buffer.find(">")
        if end < 0:
            if final:
                self._buffer = ""  # a parameter cut off in its name is dropped
                self._step = self._parameters_step
                return True
            return False
        self._parameter = self._buffer[:end].strip()
        self._buffer = self._buffer[end + 1:]
        self._value_scanned = 0
        # A repeated parameter is ignored, so the streamed members stay the final ones.
        self._keep_parameter = self._parameter not in self._arguments
        if self._keep_parameter:
            opening = ", " if self._arguments else "{"
            self._stream_arguments(opening + canonical_json(self._parameter) + ": ")
        self._step = self._value_step
        return True

    def _value_step(self, final: bool) -> bool:
        start = max(0, self._value_scanned - LONGEST_VALUE_END + 1)
        found = first_marker(self._buffer, VALUE_ENDS, start)
        if found is not None:
            at, end = found
            value = self._buffer[:at]
            # </parameter> is consumed here; any other tag is left for the next step.
            self._buffer = self._buffer[at + (len(end) if end == PARAMETER_CLOSE else 0):]
        elif final:
            # A closing tag cut off at finish is not part of the value.
            value = self._buffer[:len(self._buffer) - held_marker_length(self._buffer, VALUE_ENDS)]
            self._buffer = ""
        else:
            self._value_scanned = len(self._buffer)
            return False
        if self._keep_parameter:
            value = parameter_value(
                value, self._parameter in self._strings.get(self._open_name, ()))
            self._arguments[self._parameter] = value
            self._stream_arguments(canonical_json(value))
        self._step = self._parameters_step
        return True

    def _after_function_step(self, final: bool) -> bool:
        tag = self._leading_tag((CALL_END, FUNCTION_OPEN), final)
        if tag == WAIT:
            return False
        if tag == FUNCTION_OPEN:
            self._step = self._name_step
        else:
            self._back_to_text()
        return True
