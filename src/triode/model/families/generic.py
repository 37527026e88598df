"""`generic`: triode's own envelope for a model whose chat template has no tools
(`model/generic_tools.py`, docs/tools.md). Triode writes the tools, the past calls and the
tool outputs into the messages and gives the template none; calls are Hermes blocks, read
back by `parsers/generic.py` and forced in Hermes's syntax. It is what detection falls back
to when no family claims the template."""

from __future__ import annotations

from .. import call_grammars, generic_tools
from ..parsers.base import ToolParser
from ..parsers.generic import GenericParser
from .base import Family, Messages, Tools


class Generic(Family):
    name = "generic"
    forced = staticmethod(call_grammars.hermes)
    own_syntax = False

    def present(self, messages: Messages, tools: Tools) -> tuple[Messages, Tools]:
        return generic_tools.present(messages, tools), None

    def tool_parser(self, tools: Tools) -> ToolParser:
        return GenericParser()


FAMILY = Generic()
