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
from .translate import Plan, grammar_for, starts_in_reasoning

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


def assembler_for(plan: Plan, info: ModelInfo, thinking: bool) -> Assemble:
    """How this response's decoded text becomes output items (parser + declared tools)."""
    declared = {t.chat_name: (t.kind, t.name, t.namespace) for t in plan.tools}
    # A model may call a namespaced tool by its bare name (`exec_command` for
    # `functions.exec_command`): that resolves to it when no other tool has that name.
    bare: dict[str, list[tuple[str, str, str | None]]] = {}
    for t in plan.tools:
        bare.setdefault(t.name, []).append((t.kind, t.name, t.namespace))
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
                               starts_in_reasoning=thinking)

    return assemble
