"""Streaming parsers that turn an assistant turn's text into reasoning, text and tool calls.

    parser = make_parser(detect_format(chat_template), reasoning=..., starts_in_reasoning=...)
    for chunk in decoded_steps:
        events = parser.feed(chunk)
    events = parser.finish()

See `base` for the events and the rule for unfinished or malformed calls.
"""

from __future__ import annotations

from triode.model.parsers.base import (ParseEvent, ReasoningDelta, ReasoningDone, TextDelta,
                                       ToolCallDelta, ToolCallDone, ToolCallStart, ToolParser)
from triode.model.parsers.harmony import HarmonyParser
from triode.model.parsers.hermes import HermesParser
from triode.model.parsers.llama3 import Llama3Parser
from triode.model.parsers.mistral import MistralParser
from triode.model.parsers.plain import PlainTextParser
from triode.model.parsers.qwen3_coder import Qwen3CoderParser
from triode.model.parsers.reasoning import ReasoningParser

__all__ = [
    "FORMATS", "ParseEvent", "ReasoningDelta", "ReasoningDone", "ReasoningParser", "TextDelta",
    "ToolCallDelta", "ToolCallDone", "ToolCallStart", "detect_format", "make_parser",
]

FORMATS: dict[str, type[ToolParser]] = {
    "hermes": HermesParser,
    "mistral": MistralParser,
    "llama3": Llama3Parser,
    "qwen3_coder": Qwen3CoderParser,
    "none": PlainTextParser,
}


def make_parser(format_name: str, *, reasoning: bool, starts_in_reasoning: bool
                ) -> ReasoningParser | HarmonyParser:
    """A parser for one assistant turn in the tool-call format `format_name`."""
    if format_name == "harmony":   # channels carry the reasoning: no <think> splitter
        return HarmonyParser()
    try:
        tool_parser = FORMATS[format_name]
    except KeyError:
        raise ValueError(f"unknown tool-call format {format_name!r}; "
                         f"known: {', '.join(FORMATS)}, harmony") from None
    return ReasoningParser(tool_parser(), reasoning=reasoning,
                           starts_in_reasoning=starts_in_reasoning)


def detect_format(chat_template: str | None) -> str:
    """The tool-call format a chat template renders, from the markers it contains."""
    template = chat_template or ""
    if "<|channel|>" in template and "<|message|>" in template:
        return "harmony"   # gpt-oss
    if "<tool_call>" in template:
        return "qwen3_coder" if "<function=" in template else "hermes"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "<|start_header_id|>" in template:
        return "llama3"
    return "none"
