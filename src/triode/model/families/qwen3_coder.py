"""Qwen3-Coder: `<tool_call>` blocks holding `<function=NAME>` with one `<parameter=KEY>`
per argument, values as raw text where the tool's schema says text. The parser
(`parsers/qwen3_coder.py`) types values by the request's tools and streams them."""

from __future__ import annotations

from .. import call_grammars
from ..parsers.base import ToolParser
from ..parsers.qwen3_coder import Qwen3CoderParser
from .base import Family, Tools


class Qwen3Coder(Family):
    name = "qwen3_coder"
    forced = staticmethod(call_grammars.qwen3_coder)

    def claims(self, chat_template: str) -> bool:
        return "<tool_call>" in chat_template and "<function=" in chat_template

    def tool_parser(self, tools: Tools) -> ToolParser:
        return Qwen3CoderParser(tools)


FAMILY = Qwen3Coder()
