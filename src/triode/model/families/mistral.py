"""Mistral: `[TOOL_CALLS]` then the calls (a JSON list, or `NAME[ARGS]{...}` in newer
templates); arguments stream (`parsers/mistral.py`)."""

from __future__ import annotations

from .. import call_grammars
from ..parsers.base import ToolParser
from ..parsers.mistral import MistralParser
from .base import Family, Tools


class Mistral(Family):
    name = "mistral"
    forced = staticmethod(call_grammars.mistral)

    def claims(self, chat_template: str) -> bool:
        return "[TOOL_CALLS]" in chat_template

    def tool_parser(self, tools: Tools) -> ToolParser:
        return MistralParser()


FAMILY = Mistral()
