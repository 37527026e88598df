"""Harmony (gpt-oss): rendered and parsed by triode itself (`model/harmony.py`,
`parsers/harmony.py`), since mlx-lm has no parser for it. Its reasoning is the `analysis`
channel, not a `<think>` block; `<|call|>` and `<|return|>` end the turn; forced calls and
structured output have grammars of their own (`constraints.harmony_*`), which allow a capped
analysis message first whatever the prompt ends with."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .. import harmony
from ..constraints import (THINK_CLOSE, Grammar, harmony_analysis_tokens,
                           harmony_text_format_grammar, harmony_tool_call_grammar)
from ..parsers.harmony import HarmonyParser
from ..parsers.reasoning import THINK
from ..templates import TemplateRoles
from .base import Apply, Family, Messages, Parser, Tools


class Harmony(Family):
    name = "harmony"
    stop_markers = harmony.STOP_MARKERS
    before_mlx = True   # gpt-oss's template is read before mlx-lm's inference

    def claims(self, chat_template: str) -> bool:
        return "<|channel|>" in chat_template and "<|message|>" in chat_template

    def render(self, apply: Apply, messages: Messages, tools: Tools, roles: TemplateRoles,
               template_kwargs: Mapping[str, Any]) -> str:
        """As harmony prescribes (`harmony.render`), not through the chat template."""
        return harmony.render(messages, tools, **template_kwargs)

    def parser(self, *, reasoning: bool, starts_in_reasoning: bool, tools: Tools = None,
               think: tuple[str, str] = THINK) -> Parser:
        return HarmonyParser()   # channels carry the reasoning: no <think> splitter

    def tool_call_grammar(self, tools: Sequence[Mapping[str, Any]], mode: str = "required", *,
                          parallel: bool = True, in_reasoning: bool = False,
                          think_close: str = THINK_CLOSE,
                          max_output_tokens: int | None = None) -> Grammar:
        """One call (`<|call|>` ends the generation), after an optional analysis message."""
        return harmony_tool_call_grammar(
            tools, mode, analysis_tokens=harmony_analysis_tokens(max_output_tokens))

    def text_format_grammar(self, fmt: Mapping[str, Any], *, in_reasoning: bool = False,
                            think_close: str = THINK_CLOSE,
                            max_output_tokens: int | None = None) -> Grammar | None:
        return harmony_text_format_grammar(
            fmt, analysis_tokens=harmony_analysis_tokens(max_output_tokens))


FAMILY = Harmony()
