"""mlx-lm's other formats: every tool-call format the installed mlx-lm has a parser for
(`mlx_lm.tool_parsers`) and triode has no family module of its own for. Their calls are
parsed by mlx-lm's parser and come out whole (`parsers/whole.py`); the ones in `FORCED`
can be forced in their own syntax (`call_grammars`)."""

from __future__ import annotations

from .. import call_grammars
from ..call_grammars import ForcedCalls
from ..parsers.base import ToolParser
from ..parsers.whole import WholeCallParser
from .base import Family, Tools

# The forced-call syntax of each whole-call format that has one, by mlx-lm's name.
FORCED: dict[str, ForcedCalls] = {
    "glm47": call_grammars.glm_like(""),
    "laguna": call_grammars.glm_like(""),
    "longcat": call_grammars.glm_like("longcat_"),
    "minimax_m2": call_grammars.minimax_m2,
    "minicpm5": call_grammars.minicpm5,
    "muse_spark": call_grammars.muse_spark,
    "kimi_k3": call_grammars.kimi_k3,
    "pythonic": call_grammars.pythonic,
    "gemma4": call_grammars.gemma4,
    "function_gemma": call_grammars.function_gemma,
}


class WholeCalls(Family):
    """One of mlx-lm's formats, by mlx-lm's name for it."""

    def __init__(self, name: str, forced: ForcedCalls | None = None):
        self.name = name
        self.forced = FORCED.get(name) if forced is None else forced

    def tool_parser(self, tools: Tools) -> ToolParser:
        return WholeCallParser(self.name, tools)
