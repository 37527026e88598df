"""Validated wire request → what the actors need: chat messages, sampling, echoed fields.

Every check that can reject a request before generation lives here, so a rejected request
never reaches an actor and never creates a response.
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs

from ..errors import InvalidRequest, ModelNotFound
from ..model.constraints import THINK_CLOSE, Grammar
from ..model.families import HERMES, Family
from ..model.loading import ModelInfo
from ..model.request import Sampling
from . import compaction, wire
from .items import chat_messages, input_items
from .objects import (ConversationRef, CustomToolCallItem, CustomToolCallOutputItem, Echo,
                      FunctionCallItem, FunctionCallOutputItem, Item, ResponseReasoning,
                      ResponseTextConfig)
from .mcp import McpTools, McpTurn
from .tools import (Tool, ToolChoice, declared_tools, hosted_types, parse_tool_choice,
                    parse_tools)

# OpenAI's `include` values. The first two change the output; `message.input_image.image_url`
# is always so (stored input images keep their data URL); the others ask for parts of items
# this server never produces (hosted tools' calls), so they change nothing, as OpenAI's do
# when a response has no such item.
INCLUDES = ("reasoning.encrypted_content", "message.output_text.logprobs",
            "file_search_call.results", "web_search_call.results",
            "web_search_call.action.sources", "message.input_image.image_url",
            "computer_call_output.output.image_url", "code_interpreter_call.outputs")
MAX_STOP_SEQUENCES = 16
# The numeric request fields' inclusive bounds (the OpenAPI document states them too).
RANGES: dict[str, tuple[int, int]] = {
    "temperature": (0, 2), "top_p": (0, 1), "top_logprobs": (0, 20), "top_k": (0, 100_000),
    "min_p": (0, 1), "seed": (-(2**63), 2**63 - 1),
    "presence_penalty": (-2, 2), "frequency_penalty": (-2, 2)}
REPETITION_PENALTY_MAX = 10   # and more than 0
METADATA_MAX_ENTRIES = 16
METADATA_KEY_MAX = 64
METADATA_VALUE_MAX = 512
# background_options' completion windows that OpenAI runs later, at a discount: background
# jobs only (here every job starts as soon as a slot is free).
DEFERRED_WINDOWS = ("2h", "8h")


@attrs.frozen
class Plan:
    items: list[Item]                    # this turn's input, canonical
    messages: list[dict[str, Any]]
    sampling: Sampling
    echo: Echo                           # the request's fields its response objects carry
    stream: bool
    conversation: str | None
    tools: list[Tool]
    choice: ToolChoice
    template_tools: list[dict[str, Any]]   # what the chat template is given
    grammar: Grammar | None
    encrypted_reasoning: bool
    stop: list[str]
    template_kwargs: dict[str, Any]
    top_logprobs: int | None          # None unless the request includes output_text.logprobs
    history: list[Item] = attrs.Factory(list)   # every item rendered, replayed
    past: list[Item] = attrs.Factory(list)      # the earlier turns' items, as given
    compact_threshold: int | None = None   # context_management's compaction threshold
    compact_now: bool = False              # a trailing compaction_trigger: compact, no reply
    dropped_tools: tuple[str, ...] = ()    # hosted tool types dropped (--hosted-tools ignore)
    # MCP tools' chat names → whether a call of it waits for the client's approval.
    mcp_approvals: dict[str, bool] = attrs.Factory(dict)
    mcp: McpTurn | None = None     # its MCP servers' runner and what runs first
    raw_prompt: bool = False       # a plain prompt (/v1/completions): no chat, plain text out

    @property
    def store(self) -> bool:
        return self.echo.store

    @property
    def max_output_tokens(self) -> int | None:
        return self.echo.max_output_tokens


def check_model(name: str, accepted: tuple[str, ...]) -> None:
    if name not in accepted:
        raise ModelNotFound(
            f"The model '{name}' does not exist; this server serves {', '.join(accepted)}",
            param="model")


def _range(value: float | int | None, lo: float, hi: float, param: str) -> None:
    if value is not None and not lo <= value <= hi:
        raise InvalidRequest(f"Invalid value for '{param}': {value} is not between {lo} and {hi}",
                             param=param)


def stop_sequences(req: wire.CreateResponse) -> list[str]:
    if req.stop is None:
        return []
    return [req.stop] if isinstance(req.stop, str) else list(req.stop)


def check_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    """The metadata within OpenAI's limits (a response's or a conversation's), or a 400
    naming it."""
    if metadata is None:
        return {}
    if len(metadata) > METADATA_MAX_ENTRIES:
        raise InvalidRequest(f"Invalid 'metadata': at most {METADATA_MAX_ENTRIES} key-value "
                             f"pairs, got {len(metadata)}", param="metadata")
    for k, v in metadata.items():
        if len(k) > METADATA_KEY_MAX:
            raise InvalidRequest(f"metadata keys are at most {METADATA_KEY_MAX} characters",
                                 param=f"metadata.{k}")
        if len(v) > METADATA_VALUE_MAX:
            raise InvalidRequest(f"metadata values are at most {METADATA_VALUE_MAX} characters",
                                 param=f"metadata.{k}")
    return dict(metadata)


def validate(req: wire.CreateResponse) -> None:
    """Every check that needs nothing but the request itself."""
    for param, (lo, hi) in RANGES.items():
        _range(getattr(req, param), lo, hi, param)
    if req.repetition_penalty is not None and \
            not 0 < req.repetition_penalty <= REPETITION_PENALTY_MAX:
        raise InvalidRequest("Invalid value for 'repetition_penalty': must be in "
                             f"(0, {REPETITION_PENALTY_MAX}]", param="repetition_penalty")
    stops = stop_sequences(req)
    if len(stops) > MAX_STOP_SEQUENCES:
        raise InvalidRequest(f"Invalid value for 'stop': at most {MAX_STOP_SEQUENCES} sequences",
                             param="stop")
    for i, stop in enumerate(stops):
        if not stop:
            raise InvalidRequest("Invalid value for 'stop': sequences must not be empty",
                                 param=f"stop[{i}]" if isinstance(req.stop, list) else "stop")
    if req.max_output_tokens is not None and req.max_output_tokens < 1:
        raise InvalidRequest("Invalid value for 'max_output_tokens': must be at least 1",
                             param="max_output_tokens")
    if req.max_tool_calls is not None and req.max_tool_calls < 0:
        raise InvalidRequest("Invalid value for 'max_tool_calls': must not be negative",
                             param="max_tool_calls")
    window = req.background_options.completion_window if req.background_options else None
    if window in DEFERRED_WINDOWS and not req.background:
        raise InvalidRequest(f"the '{window}' completion window needs background: true",
                             param="background_options.completion_window")
    if req.truncation not in (None, "disabled", "auto"):
        raise InvalidRequest("Invalid value for 'truncation': expected 'auto' or 'disabled'",
                             param="truncation")
    check_metadata(req.metadata)
    if req.stream and req.background:
        raise InvalidRequest("background responses cannot be streamed; "
                             "set stream or background, not both", param="stream")
    if req.previous_response_id is not None and req.conversation is not None:
        raise InvalidRequest("previous_response_id and conversation cannot be used together",
                             param="previous_response_id")
    compact_threshold(req)
    for i, value in enumerate(req.include or []):
        if value not in INCLUDES:
            raise InvalidRequest(f"Invalid value for 'include[{i}]': '{value}'; expected one "
                                 f"of {', '.join(INCLUDES)}", param=f"include[{i}]")


def starts_in_reasoning(info: ModelInfo, prompt_text: str) -> bool:
    """The rendered prompt ends inside an open `<think>` block (the model's reasoning marker:
    a template with thinking on), so generation starts with reasoning."""
    return info.reasoning and prompt_text.rstrip().endswith(info.think[0])


def check_calls_answered(replayed: Sequence[Item], given: Sequence[Item]) -> None:
    """Every tool output in this turn's input answers a call of the history it renders with
    (OpenAI refuses one that does not): a 400 naming the output's `call_id`."""
    calls = {item.call_id for item in replayed
             if isinstance(item, (FunctionCallItem, CustomToolCallItem))}
    for i, item in enumerate(given):
        if isinstance(item, (FunctionCallOutputItem, CustomToolCallOutputItem)) \
                and item.call_id not in calls:
            raise InvalidRequest(f"No tool call found for {item.type} with call_id "
                                 f"'{item.call_id}'.", param=f"input[{i}].call_id")


def compact_threshold(req: wire.CreateResponse) -> int | None:
    """`context_management: [{"type": "compaction", "compact_threshold": N}]` → N."""
    threshold = None
    for i, entry in enumerate(req.context_management or []):
        if not 1 <= entry.compact_threshold <= compaction.THRESHOLD_MAX:
            raise InvalidRequest(
                f"compact_threshold must be an integer from 1 to {compaction.THRESHOLD_MAX}",
                param=f"context_management[{i}].compact_threshold")
        threshold = entry.compact_threshold
    return threshold


def grammar_for(plan: Plan, info: ModelInfo, *, in_reasoning: bool) -> Grammar | None:
    """The plan's grammar, in the model's family's syntax, for a prompt that already opened
    the model's reasoning (or not): then the reasoning runs to the model's closing marker
    first."""
    if plan.grammar is None or not in_reasoning:
        return plan.grammar
    return _grammar([t for t in plan.tools if t.chat_name in plan.choice.allowed],
                    plan.choice, plan.echo, info.family, in_reasoning=True,
                    think_close=info.think[1])


def forced_calls(visible: list[Tool], choice: ToolChoice, family: Family, *, parallel: bool,
                 in_reasoning: bool = False, think_close: str = THINK_CLOSE,
                 max_output_tokens: int | None = None) -> Grammar:
    """The grammar of a required (or named) tool choice over the visible tools, in the
    family's syntax; a 400 for a tool schema that cannot be enforced."""
    named = isinstance(choice.echo, dict) and (
        choice.echo.get("type") in ("function", "custom")
        or choice.echo.get("type") == "mcp" and choice.echo.get("name") is not None)
    return family.tool_call_grammar([t.for_grammar() for t in visible],
                                    choice.allowed[0] if named else "required",
                                    parallel=parallel, in_reasoning=in_reasoning,
                                    think_close=think_close,
                                    max_output_tokens=max_output_tokens)


def _grammar(visible: list[Tool], choice: ToolChoice, echo: Echo, family: Family, *,
             in_reasoning: bool = False, think_close: str = THINK_CLOSE) -> Grammar | None:
    """Constrained decoding: forced tool calls for required/named choices, else the
    structured-output format, else none; the model's family writes either in its own syntax.
    Compiled at create time (cached), so a bad schema is a 400 before anything starts."""
    if choice.mode == "required":
        return forced_calls(visible, choice, family, parallel=echo.parallel_tool_calls,
                            in_reasoning=in_reasoning, think_close=think_close,
                            max_output_tokens=echo.max_output_tokens)
    if echo.text.format.get("type") != "text":
        return family.text_format_grammar(echo.text.format, in_reasoning=in_reasoning,
                                          think_close=think_close,
                                          max_output_tokens=echo.max_output_tokens)
    return None


def text_grammar(echo: Echo, family: Family) -> Grammar | None:
    """The structured-output grammar alone (no forced call): what a response generating
    again after its tool calls ran is held to."""
    if echo.text.format.get("type") != "text":
        return family.text_format_grammar(echo.text.format, in_reasoning=False,
                                          max_output_tokens=echo.max_output_tokens)
    return None


def template_kwargs(req: wire.CreateResponse) -> dict[str, Any]:
    """What the chat template is given besides messages and tools: `chat_template_kwargs`,
    and `reasoning.effort` as `reasoning_effort` (what gpt-oss's template and the harmony
    renderer read) unless those kwargs set it themselves."""
    kwargs = dict(req.chat_template_kwargs or {})
    if req.reasoning is not None and req.reasoning.effort:
        kwargs.setdefault("reasoning_effort", req.reasoning.effort)
    return kwargs


def optional_echoes(req: wire.CreateResponse) -> dict[str, Any]:
    """The echoed fields that stay null unless the request sets them: `prompt` as given,
    the effective `prompt_cache_options` (OpenAI's defaults filled in), the effective
    image policy (nothing here compresses image context) and an explicit access program."""
    echoes: dict[str, Any] = {}
    if req.prompt is not None:
        echoes["prompt"] = attrs.asdict(req.prompt, filter=lambda a, v: v is not None)
        echoes["prompt"].setdefault("variables", None)
        echoes["prompt"].setdefault("version", None)
    if req.prompt_cache_options is not None:
        options = req.prompt_cache_options
        echoes["prompt_cache_options"] = {
            "mode": options.mode or "implicit", "ttl": options.ttl or "30m",
            "comparison_response_id": options.comparison_response_id}
    if req.image is not None:
        echoes["image"] = {"context_compression": "disabled"}
    if req.access_programs is not None and req.access_programs.cyber is not None:
        echoes["access_programs"] = {"cyber": req.access_programs.cyber}
    return echoes


def plan(req: wire.CreateResponse, defaults: Sampling,
         history: Sequence[Item] = (), conversation: str | None = None, *,
         hosted_tools: str = "ignore", items: list[Item] | None = None,
         family: Family = HERMES, mcp: McpTools | None = None) -> Plan:
    """The validated request (see `validate`) with its history, ready for the actors.
    `items`: its input already made canonical (its item references resolved), if so;
    `family`: the model's (`ModelInfo.family`), whose syntax forced calls are written in;
    `mcp`: the tools of its MCP servers (listed or reused), when this server runs them."""
    items = input_items(req) if items is None else items
    replayed = compaction.replay([*history, *items])
    check_calls_answered(replayed, items)
    raw_tools, params = declared_tools(replayed, req.tools)
    tools = parse_tools(raw_tools, hosted=hosted_tools, params=params, mcp=mcp is not None)
    if mcp is not None:
        tools += mcp.tools
        names = [t.chat_name for t in tools]
        for name in names:
            if names.count(name) > 1:
                raise InvalidRequest(f"duplicate tool name '{name}' (an MCP server's tool has "
                                     "the name of a function tool)", param="tools")
    choice = parse_tool_choice(req.tool_choice, tools)
    visible = [t for t in tools if t.chat_name in choice.allowed]
    parallel = True if req.parallel_tool_calls is None else req.parallel_tool_calls
    messages = chat_messages(req.instructions, replayed)
    temperature = defaults.temperature if req.temperature is None else req.temperature
    top_p = defaults.top_p if req.top_p is None else req.top_p
    sampling = Sampling(
        temperature=temperature, top_p=top_p,
        top_k=defaults.top_k if req.top_k is None else req.top_k,
        min_p=defaults.min_p if req.min_p is None else req.min_p,
        seed=req.seed, repetition_penalty=req.repetition_penalty,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0)
    store = True if req.store is None else req.store
    text_format = (attrs.asdict(req.text.format, filter=lambda a, v: v is not None)
                   if req.text and req.text.format else {"type": "text"})
    reasoning = ResponseReasoning(req.reasoning.effort if req.reasoning else None,
                                  req.reasoning.summary if req.reasoning else None,
                                  (req.reasoning.context or None) if req.reasoning else None)
    text = ResponseTextConfig(text_format,
                              (req.text.verbosity or None) if req.text else None)
    echo = Echo(
        instructions=req.instructions,
        max_output_tokens=req.max_output_tokens,
        max_tool_calls=req.max_tool_calls,
        metadata=req.metadata or {},
        model=req.model,
        parallel_tool_calls=parallel,
        previous_response_id=req.previous_response_id,
        conversation=ConversationRef(conversation) if conversation else None,
        reasoning=reasoning,
        store=store,
        temperature=temperature,
        text=text,
        tool_choice=choice.echo,
        tools=[t.echo() for t in tools if t.server is None]
        + (list(mcp.echoes) if mcp is not None else []),
        top_p=top_p,
        presence_penalty=sampling.presence_penalty,
        frequency_penalty=sampling.frequency_penalty,
        top_logprobs=req.top_logprobs or 0,
        truncation="auto" if req.truncation == "auto" else "disabled",   # validated
        user=req.user,
        service_tier=req.service_tier or "default",
        prompt_cache_key=req.prompt_cache_key,
        prompt_cache_retention=req.prompt_cache_retention,
        safety_identifier=req.safety_identifier,
        **optional_echoes(req),
    )
    return Plan(items=items, messages=messages, sampling=sampling, echo=echo,
                stream=bool(req.stream), conversation=conversation, tools=tools,
                choice=choice, template_tools=[t.for_template() for t in visible],
                grammar=_grammar(visible, choice, echo, family),
                encrypted_reasoning="reasoning.encrypted_content" in (req.include or []),
                stop=stop_sequences(req), template_kwargs=template_kwargs(req),
                top_logprobs=(req.top_logprobs or 0)
                if "message.output_text.logprobs" in (req.include or []) else None,
                history=replayed, past=list(history), compact_threshold=compact_threshold(req),
                dropped_tools=hosted_types(raw_tools, mcp=mcp is not None)
                if hosted_tools == "ignore" else (),
                mcp_approvals=dict(mcp.approvals) if mcp is not None else {},
                mcp=mcp.turn if mcp is not None else None)
