"""Llama 3.x: a call is a JSON object `{"name": ..., "parameters": ...}` (after
`<|python_tag|>` or alone in the turn); mlx-lm does not infer it, triode detects it by the
template's headers. Arguments stream (`parsers/llama3.py`)."""

from __future__ import annotations

from .. import call_grammars
from ..parsers.base import ToolParser
from ..parsers.llama3 import Llama3Parser
from .base import Family, Tools


class Llama3(Family):
    name = "llama3"
    forced = staticmethod(call_grammars.llama3)

    def claims(self, chat_template: str) -> bool:
        return "<|python_tag|>" in chat_template or "<|start_header_id|>" in chat_template

    def tool_parser(self, tools: Tools) -> ToolParser:
        return Llama3Parser()


FAMILY = Llama3()
