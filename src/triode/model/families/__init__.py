"""Model families: one object per tool-call format, owning everything triode does
differently for it (`base.Family`: its rendering quirks, its parser, its forced-call and
`text.format` grammars, its stop markers, its reasoning style).

    family = detect(chat_template, vocab, configured=tool_parser_type)   # or family_for(name)
    text = family.render(apply, *family.present(messages, tools), roles, template_kwargs)
    parser = family.parser(reasoning=..., starts_in_reasoning=..., tools=template_tools)
    grammar = family.tool_call_grammar(tools, "required", parallel=True)

The loaded model carries its family (`ModelInfo.family`); nothing outside this package asks
a family's name to decide anything. Names are mlx-lm's (`mlx_lm.tool_parsers`, chosen as
mlx-lm chooses them: `detect_format`). Triode's own modules here: `hermes` (mlx-lm's
`json_tools`), `qwen3_coder`, `mistral`, `llama3` (streamed by triode's parsers),
`harmony` (gpt-oss, rendered and parsed by triode), `generic` (triode's envelope for a
template without tools), `kimi_k2` (mlx-lm's parser, triode's call ids) and `plain` (`none`);
every other format of the installed mlx-lm is a `whole.WholeCalls`.

A new family is one module defining a `Family` subclass and its `FAMILY`, listed in
`FAMILIES` below (docs/architecture.md, "Adding a family").
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from ..parsers.reasoning import THINK
from ..parsers.whole import mlx_format_names
from . import generic, harmony, hermes, kimi_k2, llama3, mistral, plain, qwen3_coder
from .base import Family, Parser, Tools
from .whole import WholeCalls

__all__ = ["FAMILIES", "Family", "WholeCalls", "canonical_format", "detect", "detect_format",
           "family_for", "forced_formats", "format_names", "make_parser"]

# Triode's family modules, in the order `format_names` lists them and detection asks them
# (`Family.claims`).
FAMILIES: tuple[Family, ...] = (hermes.FAMILY, mistral.FAMILY, llama3.FAMILY,
                                qwen3_coder.FAMILY, generic.FAMILY, harmony.FAMILY,
                                kimi_k2.FAMILY, plain.FAMILY)
_BY_NAME = {family.name: family for family in FAMILIES}
# mlx-lm's names for families triode names otherwise.
ALIASES = {"json_tools": hermes.FAMILY.name}
HERMES = hermes.FAMILY     # the bundled model's
NONE = plain.FAMILY        # no tool-call format
FALLBACK = generic.FAMILY  # what a template no family claims gets


def format_names() -> tuple[str, ...]:
    """Every name `--tool-format` accepts: triode's families, each other format the
    installed mlx-lm has, and `none` last (mlx-lm's `json_tools` is accepted as `hermes`)."""
    own = [f.name for f in FAMILIES if not isinstance(f, WholeCalls) and f is not NONE]
    return (*own, *(n for n in mlx_format_names() if n not in own and n not in ALIASES),
            NONE.name)


def family_for(name: str) -> Family:
    """The family a format name (mlx-lm's, or `--tool-format`'s) stands for; a ValueError
    naming the known ones for anything else."""
    name = ALIASES.get(name, name)
    family = _BY_NAME.get(name)
    if family is not None:
        return family
    if name in mlx_format_names():
        return _whole(name)
    raise ValueError(f"unknown tool-call format {name!r}; known: {', '.join(format_names())}")


@functools.cache
def _whole(name: str) -> Family:
    return WholeCalls(name)


def canonical_format(name: str) -> str:
    """The name triode uses for a format named by mlx-lm or on the command line."""
    return family_for(name).name


def forced_formats() -> tuple[str, ...]:
    """The formats whose calls can be forced in a syntax of their own."""
    return tuple(n for n in format_names()
                 if (f := family_for(n)).forced is not None and f.own_syntax)


def make_parser(format_name: str, *, reasoning: bool, starts_in_reasoning: bool,
                tools: Tools = None, think: tuple[str, str] = THINK) -> Parser:
    """`family_for(format_name).parser(...)`."""
    return family_for(format_name).parser(reasoning=reasoning, tools=tools, think=think,
                                          starts_in_reasoning=starts_in_reasoning)


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
    first of `FAMILIES` that claims the template (`<tool_call>`: Hermes, or Qwen3-Coder with
    `<function=`; Mistral's `[TOOL_CALLS]`; Llama 3's headers); with none, triode's `generic`
    envelope. A family that claims its template `before_mlx` (harmony, which mlx-lm has no
    parser for) comes first of all."""
    template = chat_template or ""
    for family in FAMILIES:
        if family.before_mlx and family.claims(template):
            return family.name
    if configured:
        return canonical_format(configured)
    from mlx_lm.tokenizer_utils import _infer_tool_parser

    infer: Callable[[Any], str | None] = _infer_tool_parser
    inferred = infer(_TokenizerView(chat_template, vocab or {}))
    if inferred is not None:
        return canonical_format(inferred)
    for family in FAMILIES:
        if not family.before_mlx and family.claims(template):
            return family.name
    return FALLBACK.name


def detect(chat_template: str | None, vocab: Mapping[str, int] | None = None, *,
           configured: str | None = None) -> Family:
    """The family `detect_format` names."""
    return family_for(detect_format(chat_template, vocab, configured=configured))
