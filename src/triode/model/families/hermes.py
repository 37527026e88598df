"""Hermes (ChatML templates with `<tool_call>` blocks; mlx-lm's `json_tools`): Qwen 2.5/3,
SmolLM3, the bundled model. A call is `<tool_call>\n{"name": ..., "arguments": ...}\n
</tool_call>`; its arguments stream (`parsers/hermes.py`)."""

from __future__ import annotations

from .. import call_grammars
from ..parsers.base import ToolParser
from ..parsers.hermes import HermesParser
from .base import Family, Tools


class Hermes(Family):
    name = "hermes"
    forced = staticmethod(call_grammars.hermes)

    def claims(self, chat_template: str) -> bool:
        # Qwen3-Coder's blocks are `<tool_call>` too, holding `<function=`.
        return "<tool_call>" in chat_template and "<function=" not in chat_template

    def tool_parser(self, tools: Tools) -> ToolParser:
        return HermesParser()


FAMILY = Hermes()
