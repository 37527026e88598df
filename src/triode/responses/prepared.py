"""A turn ready for generation: its plan, its one `GenerationRequest`, and how the decoded
text becomes output items. Built once the prompt is rendered (`finalize`)."""

from __future__ import annotations

from typing import Callable

import attrs

from .objects import CompactionItem, Usage
from ..errors import ContextLengthExceeded
from ..model.loading import ModelInfo
from ..model.request import GenerationRequest, Rendered
from ..tenants import DEFAULT_SCOPE, scoped
from .builder import ResponseBuilder
from .output import OutputAssembler
from .tools import Tool, ToolChoice
from .translate import Plan, grammar_for, starts_in_reasoning, text_grammar

Assemble = Callable[[ResponseBuilder], OutputAssembler]


@attrs.frozen
class Compacted:
    """A compaction done before generation: its item and the input sizes around it."""

    item: CompactionItem
    before: int
    after: int
    usage: Usage          # of the summary's generation


@attrs.frozen
class Prepared:
    """A turn ready to generate. `plan` is what the turn's end keeps (its items, store and
    conversation); after a compaction its messages are the compacted ones. Without a
    generation (and assembler) the compaction is the whole answer (a compaction_trigger)."""

    plan: Plan
    generation: GenerationRequest | None
    assemble: Assemble | None
    compaction: Compacted | None = None


def finalize(plan: Plan, rendered: Rendered, info: ModelInfo,
             compaction: Compacted | None = None, *, cache_scope: str = DEFAULT_SCOPE
             ) -> Prepared:
    """The rendered prompt's generation limits, grammar and output assembly; a 400
    `context_length_exceeded` when the prompt leaves no room for output. `cache_scope`:
    the tenant whose prompt-cache namespaces the request uses (its `prompt_cache_key`
    within it), so one tenant's prefix is never another's hit."""
    prompt = rendered.tokens
    context = info.context_length
    room = context - len(prompt)
    if room < 1:
        raise ContextLengthExceeded(
            f"the input is {len(prompt)} tokens; this model's context window is {context}",
            param="input")
    thinking = starts_in_reasoning(info, rendered.text)
    generation = GenerationRequest(
        prompt=prompt, max_tokens=min(plan.max_output_tokens or room, room),
        sampling=plan.sampling, grammar=grammar_for(plan, info, in_reasoning=thinking),
        top_logprobs=plan.top_logprobs, stop=plan.stop,
        cache_key=scoped(cache_scope, plan.echo.prompt_cache_key or ""),
        images=rendered.images)
    return Prepared(plan, generation, assembler_for(plan, info, thinking), compaction)


def continued(ready: Prepared, rendered: Rendered, info: ModelInfo, *, generated: int,
              calls_made: int, tools_off: bool) -> tuple[GenerationRequest, Assemble] | None:
    """The same response generating again after its MCP calls ran: the prompt re-rendered
    with its output so far (the prompt cache holds what came before), what is left of
    `max_output_tokens`, a forced tool choice no longer forced, and `max_tool_calls` less
    the calls made. `tools_off`: no call may follow (a cap was reached). None when no
    output token is left; a 400 `context_length_exceeded` when the window is full."""
    plan, first = ready.plan, ready.generation
    assert first is not None
    room = info.context_length - len(rendered.tokens)
    if room < 1:
        raise ContextLengthExceeded(
            f"the response's tool results fill the context window ({info.context_length})",
            param="input")
    left = room if plan.max_output_tokens is None else plan.max_output_tokens - generated
    if left < 1:
        return None
    mode = "none" if tools_off or plan.choice.mode == "none" else "auto"
    plan = attrs.evolve(plan, choice=ToolChoice(mode, plan.choice.allowed, plan.choice.echo))
    plan = attrs.evolve(plan, grammar=text_grammar(plan.echo, info.family))
    thinking = starts_in_reasoning(info, rendered.text)
    generation = attrs.evolve(first, prompt=rendered.tokens, max_tokens=min(left, room),
                              grammar=grammar_for(plan, info, in_reasoning=thinking),
                              images=rendered.images)
    if plan.echo.max_tool_calls is not None:
        plan = attrs.evolve(plan, echo=attrs.evolve(
            plan.echo, max_tool_calls=max(0, plan.echo.max_tool_calls - calls_made)))
    return generation, assembler_for(plan, info, thinking)


def assembler_for(plan: Plan, info: ModelInfo, thinking: bool) -> Assemble:
    """How this response's decoded text becomes output items (parser + declared tools)."""
    declared = {t.chat_name: _resolved(t) for t in plan.tools}
    # A model may call a namespaced tool by its bare name (`exec_command` for
    # `functions.exec_command`): that resolves to it when no other tool has that name.
    bare: dict[str, list[tuple[str, str, str | None]]] = {}
    for t in plan.tools:
        bare.setdefault(t.name, []).append(_resolved(t))
    for name, matches in bare.items():
        if name not in declared and len(matches) == 1:
            declared[name] = matches[0]

    def assemble(builder: ResponseBuilder) -> OutputAssembler:
        parser = info.family.parser(reasoning=info.reasoning, starts_in_reasoning=thinking,
                                    tools=plan.template_tools, think=info.think)
        return OutputAssembler(builder, parser, resolve=declared.get,
                               allow_calls=plan.choice.mode != "none",
                               parallel=plan.echo.parallel_tool_calls,
                               max_calls=plan.echo.max_tool_calls,
                               encrypted_reasoning=plan.encrypted_reasoning,
                               starts_in_reasoning=thinking,
                               needs_approval=lambda label, name: plan.mcp_approvals.get(
                                   f"{label}.{name}", True))

    return assemble


def _resolved(tool: Tool) -> tuple[str, str, str | None]:
    """What a model's call of `tool` is: (kind, name, namespace); an MCP server's tool is
    kind `mcp`, its namespace the server's label."""
    return ("mcp" if tool.server is not None else tool.kind), tool.name, tool.namespace
