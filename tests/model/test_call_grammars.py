"""Forced tool calls in each format's own syntax: whatever a grammar lets a model write, the
format's parser reads back as calls to the tools asked for, with arguments that validate.

No model is needed: tokens are drawn at random among those the grammar allows, with each
family's fixture tokenizer (its markers as special tokens, as in the real ones)."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import llguidance
import llguidance.hf
import numpy as np
import pytest

from triode.errors import InvalidRequest
from triode.model.constraints import InvalidSchema, _bind, compile_text_format
from triode.model.families import family_for, forced_formats, make_parser
from triode.model.parsers import ReasoningDelta, TextDelta, ToolCallDone

from ..fixtures.families import FAMILIES, Family, tokenizer_json

WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["city", "days"],
    "properties": {
        "city": {"type": "string", "maxLength": 8},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 1},
        "note": {"type": ["string", "null"], "maxLength": 5},
        "exact": {"type": "boolean"}}}}
NESTED = {"type": "function", "name": "configure", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["settings"],
    "properties": {"settings": {"type": "object", "additionalProperties": False,
                                "required": ["on"], "properties": {
                                    "on": {"type": "boolean"},
                                    "level": {"type": "integer", "minimum": 0, "maximum": 3}}}}}}
EMPTY = {"type": "function", "name": "now", "parameters": {"type": "object", "properties": {},
                                                         "additionalProperties": False}}
CUSTOM = {"type": "custom", "name": "dial", "format": {"type": "grammar", "syntax": "regex",
                                                      "definition": "[0-9]{3}"}}

# The family whose tokenizer each format's samples use.
FAMILY_OF = {f.tool_format: f for f in FAMILIES.values()}
FORCED_FORMATS = forced_formats()
FLAT = ("function_gemma",)   # mlx-lm's parser reads no nested arguments


def tools_for(fmt: str) -> list[dict[str, Any]]:
    return [WEATHER, EMPTY] if fmt in FLAT else [WEATHER, NESTED, EMPTY]


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t["name"], "parameters": t.get(
        "parameters", {"type": "object", "properties": {"input": {"type": "string"}}})}}
        for t in tools]


class Sampler:
    """Draws token sequences a grammar allows, uniformly at random among allowed tokens."""

    def __init__(self, family: Family):
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerFast

        self.hf = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer.from_str(json.dumps(tokenizer_json(family))))
        self.eos = self.hf.convert_tokens_to_ids(family.eos[0])
        self.ll = llguidance.hf.from_tokenizer(self.hf, eos_token=[self.eos])

    def sample(self, grammar: Any, rng: random.Random, limit: int = 1500,
               prefer: str | None = None) -> str:
        """`prefer`: a token taken one time in ten where it is allowed (to end free text)."""
        preferred = self.hf.convert_tokens_to_ids(prefer) if prefer else None
        matcher = llguidance.LLMatcher(self.ll, _bind(grammar, self.ll), log_level=0)
        bitmask = np.zeros((self.ll.vocab_size + 31) // 32, dtype=np.int32)
        tokens: list[int] = []
        for _ in range(limit):
            matcher.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)
            allowed = np.flatnonzero(np.unpackbits(bitmask.view(np.uint8),
                                                   bitorder="little")[:self.ll.vocab_size])
            others = [int(t) for t in allowed if t != self.eos]
            if matcher.is_accepting() and (not others or rng.random() < 0.5):
                self.tokens = tokens
                return self.hf.decode(tokens, skip_special_tokens=False)
            token = preferred if preferred in others and rng.random() < 0.1 \
                else rng.choice(others)
            assert matcher.consume_token(token), matcher.get_error()
            tokens.append(token)
        raise AssertionError("the grammar did not end: " + self.hf.decode(tokens[:200]))


_samplers: dict[str, Sampler] = {}


def sampler(fmt: str) -> Sampler:
    if fmt not in _samplers:
        _samplers[fmt] = Sampler(FAMILY_OF[fmt])
    return _samplers[fmt]


def parsed(fmt: str, text: str, tools: list[dict[str, Any]], **flags: bool) -> list[Any]:
    parser = make_parser(fmt, tools=chat_tools(tools), reasoning=flags.get("reasoning", False),
                         starts_in_reasoning=flags.get("starts_in_reasoning", False))
    return parser.feed(text) + parser.finish()


def check_calls(events: list[Any], tools: list[dict[str, Any]], *, names: set[str],
                count: int | None) -> None:
    assert not [e for e in events if isinstance(e, TextDelta)], events
    calls = [e for e in events if isinstance(e, ToolCallDone)]
    assert calls and (count is None or len(calls) == count), events
    by_name = {t["name"]: t for t in tools}
    for call in calls:
        assert call.name in names, call
        schema = by_name[call.name].get("parameters") or {
            "type": "object", "properties": {"input": {"type": "string"}}}
        jsonschema.validate(json.loads(call.arguments), schema)


@pytest.mark.parametrize("fmt", FORCED_FORMATS)
def test_required_calls_parse_back_and_validate(fmt):
    """tool_choice required, parallel: each sampled output is one or more calls to declared
    tools whose arguments validate against their schemas, and nothing else."""
    tools = tools_for(fmt)
    grammar = family_for(fmt).tool_call_grammar(tools, "required", parallel=True)
    rng = random.Random(fmt)
    for _ in range(8):
        text = sampler(fmt).sample(grammar, rng)
        events = parsed(fmt, text, tools)
        check_calls(events, tools, names={t["name"] for t in tools}, count=None)
        # The forced set is bounded, so the turn ends: at most as many calls as tools.
        assert len([e for e in events if isinstance(e, ToolCallDone)]) <= len(tools)


@pytest.mark.parametrize("fmt", FORCED_FORMATS)
def test_a_named_call_is_one_call_even_with_parallel_calls_allowed(fmt):
    """A named tool_choice with parallel calls on (the API's default) is still exactly one
    call: the grammar must end there, or a model may write call after call to the limit."""
    tools = tools_for(fmt)
    grammar = family_for(fmt).tool_call_grammar(tools, "get_weather", parallel=True)
    assert grammar == family_for(fmt).tool_call_grammar(tools, "get_weather", parallel=False)
    rng = random.Random(fmt + "named-parallel")
    for _ in range(4):
        text = sampler(fmt).sample(grammar, rng)
        check_calls(parsed(fmt, text, tools), tools, names={"get_weather"}, count=1)


@pytest.mark.parametrize("fmt", FORCED_FORMATS)
def test_named_call_is_exactly_one_call_to_it(fmt):
    """A named tool_choice without parallel calls: exactly one call, to that tool."""
    tools = tools_for(fmt)
    grammar = family_for(fmt).tool_call_grammar(tools, "get_weather", parallel=False)
    rng = random.Random(fmt + "named")
    for _ in range(6):
        text = sampler(fmt).sample(grammar, rng)
        check_calls(parsed(fmt, text, tools), tools, names={"get_weather"}, count=1)


@pytest.mark.parametrize("fmt", FORCED_FORMATS)
def test_custom_tool_with_a_regex_format(fmt):
    """A custom tool is a function of one `input` string; its regex format holds."""
    tools = [CUSTOM]
    grammar = family_for(fmt).tool_call_grammar(tools, "dial", parallel=False)
    text = sampler(fmt).sample(grammar, random.Random(fmt))
    [call] = [e for e in parsed(fmt, text, tools) if isinstance(e, ToolCallDone)]
    assert call.name == "dial"
    arguments = json.loads(call.arguments)
    assert set(arguments) == {"input"} and len(arguments["input"]) == 3 \
        and arguments["input"].isdigit()


@pytest.mark.parametrize("fmt", ["glm47", "minimax_m2", "kimi_k2", "pythonic", "hermes"])
def test_forced_call_after_reasoning_the_prompt_opened(fmt):
    """With the prompt inside <think>, reasoning runs to </think>, then the call."""
    tools = [WEATHER]
    grammar = family_for(fmt).tool_call_grammar(tools, "get_weather", parallel=False,
                                in_reasoning=True)
    text = sampler(fmt).sample(grammar, random.Random(fmt), prefer="</think>")
    events = parsed(fmt, text, tools, reasoning=True, starts_in_reasoning=True)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == \
        text[:text.index("</think>")].strip()
    check_calls(events, tools, names={"get_weather"}, count=1)


def test_structured_output_is_the_reply_text_in_every_format():
    """text.format's JSON is the message text; the format's parser leaves it text."""
    grammar = compile_text_format({"type": "json_schema", "name": "w", "strict": True,
                                   "schema": WEATHER["parameters"] | {"required": list(
                                       WEATHER["parameters"]["properties"])}})
    assert grammar is not None
    for fmt in ("glm47", "gemma4", "pythonic", "kimi_k2", "mistral"):
        text = sampler(fmt).sample(grammar, random.Random(fmt))
        events = parsed(fmt, text, [])
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
        jsonschema.validate(json.loads(text), WEATHER["parameters"])


def test_function_gemma_refuses_nested_arguments_by_name():
    """FunctionGemma's syntax (as mlx-lm parses it) has no nested objects: a 400 naming the
    tool's parameters, not a call that would not parse back."""
    with pytest.raises(InvalidSchema) as caught:
        family_for("function_gemma").tool_call_grammar([WEATHER, NESTED], "required")
    assert caught.value.param == "tools[1].parameters"
    assert "configure" in caught.value.message


def test_a_model_without_a_format_cannot_be_forced():
    with pytest.raises(InvalidRequest) as caught:
        family_for("none").tool_call_grammar([WEATHER], "required")
    assert caught.value.param == "tool_choice"


@pytest.mark.parametrize("fmt", FORCED_FORMATS)
def test_markers_are_the_tokenizers_special_tokens(fmt):
    """A marker the tokenizer holds as one special token is written as that token (bound by
    id), never spelled out in other tokens, so the model sees its own markup."""
    grammar = family_for(fmt).tool_call_grammar([WEATHER], "get_weather", parallel=False)
    s = sampler(fmt)
    text = s.sample(grammar, random.Random(1))
    for _, marker in grammar.markers:
        if marker in FAMILY_OF[fmt].special and marker in text:
            assert text.count(marker) == s.tokens.count(s.hf.convert_tokens_to_ids(marker))


@pytest.mark.parametrize("fmt", ["gemma4", "function_gemma"])
def test_gemma_refuses_a_name_its_parser_cannot_read(fmt):
    """Gemma's parsers read a name as a word: a namespaced tool cannot be forced there."""
    tool = {**EMPTY, "name": "shell.exec"}
    with pytest.raises(InvalidSchema, match="shell.exec"):
        family_for(fmt).tool_call_grammar([tool], "required")
