"""What every model family answers: `Family`, with the defaults most families keep.

A family is the part of a model that triode has to know by name: how its chat template is
given the conversation (`present`, `render`), how its output is read (`parser`), how a call
or a JSON reply is forced in its syntax (`tool_call_grammar`, `text_format_grammar`), which
tokens end its turn besides EOS (`stop_markers`) and how its reasoning is marked (`think`,
where the tokenizer names no markers of its own: `ModelInfo.think`). The defaults fit a model whose template renders tools and calls itself and whose reasoning is a
`<think>` block; a family overrides what differs.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ...errors import InvalidRequest
from ..call_grammars import ForcedCalls
from ..constraints import THINK_CLOSE, Grammar, compile_text_format, tool_call_grammar
from ..parsers.base import ToolParser
from ..parsers.harmony import HarmonyParser
from ..parsers.reasoning import THINK, ReasoningParser
from ..templates import TemplateRoles, render_fitted

Messages = list[dict[str, Any]]
Tools = Sequence[dict[str, Any]] | None
# The tokenizer's chat template: (messages, tools or None) -> the prompt text.
Apply = Callable[[Messages, Tools], str]
Parser = ReasoningParser | HarmonyParser


class Family:
    """One tool-call format and everything that goes with it. Instances are stateless and
    shared: `ModelInfo.family` is one, `family_for(name)` finds one."""

    name: str = ""
    # The calls part of a forced turn in this family's syntax; None: calls cannot be forced.
    forced: ForcedCalls | None = None
    # Whether `forced` is this family's own syntax (generic borrows Hermes's).
    own_syntax: bool = True
    # Marker tokens that end generation besides the tokenizer's EOS.
    stop_markers: tuple[str, ...] = ()
    # The reasoning block's markers where mlx-lm's tokenizer names none (its think_start /
    # think_end): a model reasons when its vocabulary holds them.
    think: tuple[str, str] = THINK
    # Whether `claims` is asked before mlx-lm's inference (for a format mlx-lm misreads).
    before_mlx: bool = False

    def __repr__(self) -> str:
        return f"<family {self.name}>"

    # ---- detection ---------------------------------------------------------------------

    def claims(self, chat_template: str) -> bool:
        """The template is unmistakably this family's (asked where mlx-lm infers nothing;
        `before_mlx` families are asked before mlx-lm is)."""
        return False

    # ---- the prompt --------------------------------------------------------------------

    def present(self, messages: Messages, tools: Tools) -> tuple[Messages, Tools]:
        """The messages and tools the chat template is given (the images are read from
        these messages)."""
        return messages, tools

    def fit_messages(self, messages: Messages) -> Messages:
        """The messages as this family's template needs them before roles are fitted."""
        return messages

    def render(self, apply: Apply, messages: Messages, tools: Tools, roles: TemplateRoles,
               template_kwargs: Mapping[str, Any]) -> str:
        """The prompt for `present`ed messages and tools: the template (`apply`, which the
        caller has given `template_kwargs`), with the roles it refuses merged as
        docs/models.md says."""
        text: str = render_fitted(lambda fitted: apply(fitted, tools),
                                  self.fit_messages(list(messages)), roles)
        return text

    # ---- the output --------------------------------------------------------------------

    def tool_parser(self, tools: Tools) -> ToolParser:
        raise NotImplementedError

    def parser(self, *, reasoning: bool, starts_in_reasoning: bool, tools: Tools = None,
               think: tuple[str, str] = THINK) -> Parser:
        """A parser for one assistant turn. `tools`: the request's tools as the chat
        template gets them (some formats type arguments by their schemas); `think`: the
        model's reasoning markers."""
        return ReasoningParser(self.tool_parser(tools), reasoning=reasoning,
                               starts_in_reasoning=starts_in_reasoning, think=think)

    # ---- constrained decoding ----------------------------------------------------------

    def tool_call_grammar(self, tools: Sequence[Mapping[str, Any]], mode: str = "required", *,
                          parallel: bool = True, in_reasoning: bool = False,
                          think_close: str = THINK_CLOSE,
                          max_output_tokens: int | None = None) -> Grammar:
        """Forced calls (`constraints.tool_call_grammar`) in this family's syntax;
        `in_reasoning`: the prompt opened the reasoning, which runs to `think_close` first."""
        if self.forced is None:
            raise InvalidRequest(f"this model's tool-call format ({self.name}) cannot be "
                                 "forced; start triode with --tool-format to name its format",
                                 param="tool_choice")
        return tool_call_grammar(tools, mode, parallel=parallel, in_reasoning=in_reasoning,
                                 forced=self.forced, think_close=think_close)

    def text_format_grammar(self, fmt: Mapping[str, Any], *, in_reasoning: bool = False,
                            think_close: str = THINK_CLOSE,
                            max_output_tokens: int | None = None) -> Grammar | None:
        """Structured output (`constraints.compile_text_format`): the JSON is the reply's
        text."""
        return compile_text_format(fmt, in_reasoning=in_reasoning, think_close=think_close)
