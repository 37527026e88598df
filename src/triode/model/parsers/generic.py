"""triode's generic tool-call envelope, for models whose chat template has no tool format
(docs/tools.md). The model is shown Hermes's blocks, one call per block:

    <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>

and that is what forced calls write. A block may also hold a JSON list of calls, the form
SmolLM2 was trained on (`<tool_call>[{"name": ...}, {"name": ...}]</tool_call>`); an empty
list (its way of saying no call is needed) is markup with no call in it. Arguments stream as
they are generated in both forms.
"""

from __future__ import annotations

from triode.model.parsers.base import CallObject
from triode.model.parsers.hermes import ARGUMENTS_KEYS, HermesParser

LIST_OPEN, LIST_SEPARATOR, LIST_CLOSE = "[", ",", "]"


class GenericParser(HermesParser):
    def _call_open_step(self, final: bool) -> bool:
        self._buffer = self._buffer.lstrip()
        if self._buffer.startswith(LIST_OPEN):
            self._buffer = self._buffer[len(LIST_OPEN):]
            self._step = self._list_step
            return True
        return super()._call_open_step(final)

    def _list_step(self, final: bool) -> bool:
        """Inside a list of calls: the next call, a separator, or the list's end."""
        self._buffer = self._buffer.lstrip()
        if not self._buffer:
            return False
        if self._buffer.startswith("{"):
            self._call = CallObject(ARGUMENTS_KEYS)
            self._step = self._listed_call_step
        elif self._buffer.startswith(LIST_SEPARATOR):
            self._buffer = self._buffer[len(LIST_SEPARATOR):]
        elif self._buffer.startswith(LIST_CLOSE):
            self._buffer = self._buffer[len(LIST_CLOSE):]
            self._step = self._call_close_step
        else:
            self._step = self._skip_block_step
        return True

    def _listed_call_step(self, final: bool) -> bool:
        if not self._follow_call_object(self._call, final):
            return False
        self._step = self._list_step
        return True
