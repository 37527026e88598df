"""Streaming parsers that turn an assistant turn's text into reasoning, text and tool calls.

    parser = make_parser(detect_format(chat_template), reasoning=..., starts_in_reasoning=...,
                         tools=template_tools)
    for chunk in decoded_steps:
        events = parser.feed(chunk)
    events = parser.finish()

Formats are mlx-lm's (`mlx_lm.tool_parsers`, chosen as mlx-lm chooses them: `detect_format`).
Four have parsers of their own here that stream a call's arguments while they are generated:
`hermes` (mlx-lm's `json_tools`), `mistral`, `llama3` (which mlx-lm does not infer) and
`qwen3_coder`. Every other mlx-lm format is parsed by mlx-lm's own parser and its calls come
out whole (`whole`). A model whose template has no tool format gets triode's own envelope,
`generic` (Hermes blocks, shown to the model by triode: `model/generic_tools.py`,
docs/tools.md), streamed too; `none`, asked for with `--tool-format`, leaves all of the
output text. See `base` for the events and the rule for unfinished or malformed calls.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from triode.model.parsers.base import (ParseEvent, ReasoningDelta, ReasoningDone, TextDelta,
                                       ToolCallDelta, ToolCallDone, ToolCallStart, ToolParser)
from triode.model.parsers.generic import GenericParser
from triode.model.parsers.harmony import HarmonyParser
from triode.model.parsers.hermes import HermesParser
from triode.model.parsers.llama3 import Llama3Parser
from triode.model.parsers.mistral import MistralParser
from triode.model.parsers.plain import PlainTextParser
from triode.model.parsers.qwen3_coder import Qwen3CoderParser
from triode.model.parsers.reasoning import THINK, ReasoningParser
from triode.model.parsers.whole import WholeCallParser, mlx_format_names

__all__ = [
    "GENERIC", "STREAMED", "ParseEvent", "ReasoningDelta", "ReasoningDone", "ReasoningParser",
    "TextDelta", "ToolCallDelta", "ToolCallDone", "ToolCallStart", "canonical_format",
    "detect_format", "format_names", "make_parser",
]

Tools = Sequence[Mapping[str, Any]] | None

# The formats whose arguments stream, by triode's name for them.
STREAMED: dict[str, Callable[[Tools], ToolParser]] = {
    "hermes": lambda tools: HermesParser(),
    "mistral": lambda tools: MistralParser(),
    "llama3": lambda tools: Llama3Parser(),
    "qwen3_coder": Qwen3CoderParser,
    "generic": lambda tools: GenericParser(),
}
# mlx-lm's names for formats triode calls otherwise.
ALIASES = {"json_tools": "hermes"}
NONE = "none"
GENERIC = "generic"   # triode's envelope for a template without tools (`model/generic_tools.py`)
HARMONY = "harmony"   # gpt-oss: rendered and parsed by triode itself (`model/harmony.py`)


def format_names() -> tuple[str, ...]:
    """Every format `--tool-format` accepts: triode's streamed ones (`generic` among them)
    and harmony, each other format the installed mlx-lm has, and `none` (mlx-lm's
    `json_tools` is accepted as `hermes`)."""
    return (*STREAMED, HARMONY,
            *(n for n in mlx_format_names() if n not in STREAMED and n not in ALIASES), NONE)


def canonical_format(name: str) -> str:
    """The name triode uses for a format named by mlx-lm or on the command line; a
    ValueError naming the known ones for anything else."""
    name = ALIASES.get(name, name)
    if name in STREAMED or name in (NONE, HARMONY) or name in mlx_format_names():
        return name
    raise ValueError(f"unknown tool-call format {name!r}; known: {', '.join(format_names())}")


def make_parser(format_name: str, *, reasoning: bool, starts_in_reasoning: bool,
                tools: Tools = None, think: tuple[str, str] = THINK
                ) -> ReasoningParser | HarmonyParser:
    """A parser for one assistant turn in the tool-call format `format_name`. `tools`: the
    request's tools as the chat template gets them (some formats type arguments by their
    schemas); `think`: the model's reasoning markers."""
    name = canonical_format(format_name)
    if name == HARMONY:   # channels carry the reasoning: no <think> splitter
        return HarmonyParser()
    tool_parser: ToolParser
    if name in STREAMED:
        tool_parser = STREAMED[name](tools)
    elif name == NONE:
        tool_parser = PlainTextParser()
    else:
        tool_parser = WholeCallParser(name, tools)
    return ReasoningParser(tool_parser, reasoning=reasoning,
                           starts_in_reasoning=starts_in_reasoning, think=think)


class _TokenizerView:
    """What mlx-lm's inference reads of a tokenizer: its template and its vocabulary."""

    def __init__(self, chat_template: str | None, vocab: Mapping[str, int]):
        self.chat_template = chat_template
        self._vocab = vocab

    def get_vocab(self) -> Mapping[str, int]:
        return self._vocab


def detect_format(chat_template: str | None, vocab: Mapping[str, int] | None = None, *,
                  configured: str | None = None) -> str:
    """The tool-call format of a model, decided as mlx-lm decides it: the tokenizer config's
    `tool_parser_type` (`configured`), else mlx-lm's inference from the chat template and then
    the vocabulary (`mlx_lm.tokenizer_utils._infer_tool_parser`, in its order: a GLM template
    contains `<tool_call>` too, and is glm47, not Hermes). Where mlx-lm infers nothing, the
    markers of triode's own formats: `<tool_call>` (Hermes, or Qwen3-Coder with `<function=`)
    and Llama 3's headers; with none of them, triode's `generic` envelope. Harmony (gpt-oss),
    which mlx-lm has no parser for, comes first."""
    if chat_template and "<|channel|>" in chat_template and "<|message|>" in chat_template:
        return HARMONY   # gpt-oss
    if configured:
        return canonical_format(configured)
    from mlx_lm.tokenizer_utils import _infer_tool_parser

    infer: Callable[[Any], str | None] = _infer_tool_parser
    inferred = infer(_TokenizerView(chat_template, vocab or {}))
    if inferred is not None:
        return canonical_format(inferred)
    template = chat_template or ""
    if "<tool_call>" in template:
        return "qwen3_coder" if "<function=" in template else "hermes"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|python_tag|>" in template or "<|start_header_id|>" in template:
        return "llama3"
    return GENERIC
