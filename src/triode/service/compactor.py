"""Compaction with the model: choose what to keep, summarize the rest, check the result.

Used by `POST /v1/responses/compact` and by `context_management` (by the turn service before
a response starts, or inside a background job while it is queued). Every refusal is a 400
`context_length_exceeded` raised before anything is stored or changed.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio

from ..actors.model import ModelHandle
from ..errors import ContextLengthExceeded
from ..model.parsers import TextDelta
from ..model.request import GenerationRequest, Rendered, Sampling
from ..responses import compaction
from ..responses.objects import CompactionItem, Item, ReasoningItem, Usage
from ..responses.objects import usage as usage_of
from ..responses.items import chat_messages, reasoning_text
from ..responses.translate import Plan, starts_in_reasoning

ITEM_OVERHEAD = 4   # role and separator tokens a chat template adds around one message


@attrs.frozen
class Transcript:
    """What compaction works on: a turn's instructions and replayed history, and the tools
    and template arguments its prompt renders with."""

    instructions: str | None
    history: list[Item]
    template_tools: list[dict[str, Any]]
    template_kwargs: dict[str, Any]

    @classmethod
    def of(cls, plan: Plan) -> Transcript:
        return cls(plan.echo.instructions, plan.history, plan.template_tools,
                   plan.template_kwargs)


@attrs.frozen
class Compaction:
    item: CompactionItem                 # the compaction item
    system: list[Item]                   # kept system/developer messages
    kept: list[Item]                     # kept items
    messages: list[dict[str, Any]]       # the compacted history as chat messages
    rendered: Rendered                   # ... rendered with the request's tools
    before: int                          # input tokens before
    after: int                           # input tokens after
    usage: Usage                         # of the summary generation


def _item_text(item: Item) -> str:
    if isinstance(item, ReasoningItem):
        return reasoning_text(item)
    return json.dumps(chat_messages(None, [item]), ensure_ascii=False)


async def item_sizes(model: ModelHandle, items: list[Item]) -> list[int]:
    """Approximate tokens per item (its chat-message text plus a template's overhead)."""
    tokenizer = model.tokenizer

    def work() -> list[int]:
        return [len(tokenizer.encode(_item_text(item), add_special_tokens=False))
                + ITEM_OVERHEAD for item in items]

    return await trio.to_thread.run_sync(work)


async def summarize(model: ModelHandle, instructions: str | None,
                    history: list[Item], max_tokens: int,
                    template_kwargs: dict[str, Any], cache_key: str = "") -> tuple[str, Usage]:
    """One greedy, non-streaming generation through the model actor; returns the summary
    text (reasoning and markup stripped by the model's parser) and its usage.
    `cache_key`: the prompt-cache namespace (the tenant's)."""
    info = model.info
    messages = [*chat_messages(instructions, history),
                {"role": "user", "content": compaction.SUMMARY_REQUEST}]
    rendered = await model.render(messages, None, template_kwargs)
    room = info.context_length - len(rendered.tokens)
    if room < 1:
        raise ContextLengthExceeded(
            f"the history to summarize is {len(rendered.tokens)} tokens, longer than the "
            f"context window ({info.context_length})", param="input")
    parser = info.family.parser(reasoning=info.reasoning, think=info.think,
                                starts_in_reasoning=starts_in_reasoning(info, rendered.text))
    events: list[Any] = []
    generated = 0
    summary_request = GenerationRequest(rendered.tokens, min(max_tokens, room),
                                        Sampling(temperature=0.0), cache_key=cache_key,
                                        images=rendered.images)
    async with model.generate(summary_request) as adm:
        async for out in adm.outputs:
            generated += 1
            events += parser.feed(out.text)
            if out.finish_reason is not None:
                break
    events += parser.finish()
    summary = "".join(e.text for e in events if isinstance(e, TextDelta)).strip()
    return summary, usage_of(input_tokens=len(rendered.tokens), output_tokens=generated)


async def compact(model: ModelHandle, transcript: Transcript, *, before: int,
                  keep_tokens: int | None = None,
                  max_output_tokens: int = compaction.SUMMARY_MAX_TOKENS,
                  submits: bool = True, short_ok: bool = False, cache_key: str = ""
                  ) -> Compaction:
    """Compacts the transcript's history (rendered: `before` tokens); `keep_tokens`
    defaults to min(context/16, 8192). `submits`: the compacted prompt is generated from
    next (not for /compact). `short_ok`: a history too short to shrink (nothing to drop, or
    a summary no shorter than what it replaces) is kept whole in a compaction item with an
    empty summary (OpenAI's /compact and compaction_trigger); otherwise, as
    `context_management` wants, that is a 400."""
    context = model.info.context_length
    if keep_tokens is None:
        keep_tokens = compaction.default_keep_tokens(context)
    instructions, items = transcript.instructions, transcript.history
    template_tools, template_kwargs = transcript.template_tools, transcript.template_kwargs
    sizes = dict(zip(map(id, items), await item_sizes(model, items)))
    system, dropped, kept = compaction.select(items, keep_tokens, lambda i: sizes[id(i)])
    if not dropped and short_ok:
        return await _whole(model, transcript, system, kept, before, submits)
    if not dropped:
        raise ContextLengthExceeded(
            "compaction cannot shorten this context: every turn is kept (the last user "
            "message and the turns after it)", param="input")
    summary, usage = await summarize(model, instructions, [*system, *dropped],
                                     max_output_tokens, template_kwargs, cache_key)
    compacted = [*system, compaction.summary_message(summary), *kept]
    messages = chat_messages(instructions, compacted)
    rendered = await model.render(messages, template_tools, template_kwargs, submits=submits)
    after = len(rendered.tokens)
    if after >= context:
        raise ContextLengthExceeded(
            f"the compacted input ({after} tokens) does not fit the context window "
            f"({context}) with room for output", param="input")
    if after >= before and short_ok:
        body = [item for item in items if not compaction.is_system(item)]   # in order
        return await _whole(model, transcript, system, body, before, submits)
    if after >= before:
        raise ContextLengthExceeded(
            f"the summary does not shorten the context ({before} tokens before, {after} "
            "after)", param="input")
    return Compaction(compaction.compaction_item(summary, kept), system, kept, messages,
                      rendered, before, after, usage)


async def _whole(model: ModelHandle, transcript: Transcript, system: list[Item],
                 body: list[Item], before: int, submits: bool) -> Compaction:
    """A history too short to shrink, kept whole: a compaction item with an empty summary
    (replay adds no summary message for it) standing in for nothing."""
    messages = chat_messages(transcript.instructions, [*system, *body])
    rendered = await model.render(messages, transcript.template_tools,
                                  transcript.template_kwargs, submits=submits)
    return Compaction(compaction.compaction_item("", body), system, body, messages, rendered,
                      before, len(rendered.tokens), usage_of(input_tokens=before))
