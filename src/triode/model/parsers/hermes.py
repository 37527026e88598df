"""Hermes / Qwen JSON tool calls, as the bundled model writes them:

    <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>

Several blocks may follow one another, after some text. The arguments object streams as
it is generated, character for character as the model wrote it.
"""

from __future__ import annotations

from triode.model.parsers.base import WAIT, CallObject, ToolParser

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"
ARGUMENTS_KEYS = ("arguments",)


class HermesParser(ToolParser):
    markers = (CALL_START, CALL_END)
    block_end = CALL_END

    def _on_marker(self, marker: str) -> None:
        if marker == CALL_START:
            self._step = self._call_open_step
        else:
            self._back_to_text()  # a stray closer is markup all the same

    def _call_open_step(self, final: bool) -> bool:
        self._buffer = self._buffer.lstrip()
        if not self._buffer:
            return False
        if self._buffer.startswith("{"):
            self._call = CallObject(ARGUMENTS_KEYS)
            self._step = self._call_step
        else:
            self._step = self._skip_block_step
        return True

    def _call_step(self, final: bool) -> bool:
        if not self._follow_call_object(self._call, final):
            return False
        self._step = self._call_close_step
        return True

    def _call_close_step(self, final: bool) -> bool:
        if self._leading_tag((CALL_END,), final) == WAIT:
            return False
        self._back_to_text()
        return True
