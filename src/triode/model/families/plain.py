"""`none` (asked for with `--tool-format none`): no tool-call format; everything after the
reasoning is message text, and calls cannot be forced."""

from __future__ import annotations

from ..parsers.base import ToolParser
from ..parsers.plain import PlainTextParser
from .base import Family, Tools


class Plain(Family):
    name = "none"

    def tool_parser(self, tools: Tools) -> ToolParser:
        return PlainTextParser()


FAMILY = Plain()
