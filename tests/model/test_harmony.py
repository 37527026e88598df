"""Harmony (gpt-oss): the renderer against openai-harmony's own expected texts, the streaming
parser on canonical and broken outputs fed in every slicing, and the forced-call and
structured-output grammars, on the gpt_oss fixture's tokenizer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from tests.fixtures.gpt_oss import CHAT_TEMPLATE, build_gpt_oss
from tests.model.test_parsers import Outcome, chunkings, collect
from triode.model import harmony
from triode.model.constraints import (ConstrainedProcessor, harmony_analysis_tokens,
                                      harmony_text_format_grammar, harmony_tool_call_grammar)
from triode.model.families import detect_format, make_parser
from triode.model.parsers import TextDelta, ReasoningDelta
from triode.model.parsers.harmony import _KNOWN

# ---- rendering ------------------------------------------------------------------------------

WEATHER_TOOLS = [
    {"type": "function", "function": {
        "name": "get_location", "description": "Gets the location of the user.",
        "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "get_current_weather",
        "description": "Gets the current weather in the provided location.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string",
                         "description": "The city and state, e.g. San Francisco, CA"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"],
                       "default": "celsius"}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "get_multiple_weathers",
        "description": "Gets the current weather in the provided list of locations.",
        "parameters": {"type": "object", "properties": {
            "locations": {"type": "array", "items": {"type": "string"},
                          "description": 'List of city and state, e.g. ["San Francisco, CA", '
                                         '"New York, NY"]'},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"],
                       "default": "celsius"}},
            "required": ["locations"]}}},
    {"type": "function", "function": {
        "name": "kitchensink", "description": "A function with various complex schemas.",
        "parameters": {"description": "params object", "type": "object", "properties": {
            "string": {"type": "string", "title": "STRING", "description": "A string",
                       "examples": ["hello", "world"]},
            "string_nullable": {"type": "string", "nullable": True,
                                "description": "A nullable string", "default": "the default"},
            "string_enum": {"type": "string", "enum": ["a", "b", "c"]},
            "oneof_string_or_number": {
                "oneOf": [{"type": "string", "default": "default_string_in_oneof"},
                          {"type": "number", "description": "numbers can happen too"}],
                "description": "a oneof", "default": 20}}}}},
]

# openai-harmony's test-data/test_render_functions_with_parameters.txt (Apache-2.0).
HARMONY_FUNCTIONS_EXPECTED = """\
<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
Knowledge cutoff: 2024-06
Current date: 2025-06-28

Reasoning: high

# Valid channels: analysis, commentary, final. Channel must be included for every message.
Calls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|># Instructions

Always respond in riddles

# Tools

## functions

namespace functions {

// Gets the location of the user.
type get_location = () => any;

// Gets the current weather in the provided location.
type get_current_weather = (_: {
// The city and state, e.g. San Francisco, CA
location: string,
format?: "celsius" | "fahrenheit", // default: celsius
}) => any;

// Gets the current weather in the provided list of locations.
type get_multiple_weathers = (_: {
// List of city and state, e.g. ["San Francisco, CA", "New York, NY"]
locations: string[],
format?: "celsius" | "fahrenheit", // default: celsius
}) => any;

// A function with various complex schemas.
type kitchensink = (_: // params object
{
// STRING
//
// A string
// Examples:
// - "hello"
// - "world"
string?: string,
// A nullable string
string_nullable?: string | null, // default: "the default"
string_enum?: "a" | "b" | "c",
// a oneof
// default: 20
oneof_string_or_number?:
 | string // default: "default_string_in_oneof"
 | number // numbers can happen too
,
}) => any;

} // namespace functions<|end|><|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant"""

SYSTEM_MEDIUM = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n\nReasoning: medium\n\n# Valid channels: analysis, "
    "commentary, final. Channel must be included for every message.<|end|>")


def test_tools_and_instructions_render_as_openai_harmony_renders_them():
    """System message, developer instructions and the TypeScript-like `functions` namespace
    are byte for byte openai-harmony's own expected text."""
    messages = [{"role": "system", "content": "Always respond in riddles"},
                {"role": "user", "content": "What is the weather like in SF?"}]
    assert harmony.render(messages, WEATHER_TOOLS, reasoning_effort="high",
                          conversation_start_date="2025-06-28") == HARMONY_FUNCTIONS_EXPECTED


def test_analysis_is_dropped_from_a_turn_that_ended_in_a_final_answer():
    """openai-harmony's test_dropping_cot_by_default, after triode's system message."""
    messages = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "2 + 2 equals 4.",
         "reasoning_content": "User asks: “What is 2 + 2?” Simple arithmetic. Provide answer."},
        {"role": "user", "content": "What about 9 / 2?"}]
    assert harmony.render(messages) == SYSTEM_MEDIUM + (
        "<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>final"
        "<|message|>2 + 2 equals 4.<|end|><|start|>user<|message|>What about 9 / 2?<|end|>"
        "<|start|>assistant")


def test_analysis_before_a_call_is_kept_and_the_call_renders_as_the_model_writes_it():
    """The format guide's function-calling round trip: the analysis that led to the call
    stays, the call is `<|channel|>commentary to=functions.NAME <|constrain|>json`, the
    output comes from `functions.NAME to=assistant`."""
    messages = [
        {"role": "user", "content": "What is the weather like in SF?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need to use function get_weather.",
         "tool_calls": [{"type": "function", "id": "call_1", "function": {
             "name": "get_weather", "arguments": '{"location":"San Francisco"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
         "content": '{"sunny": true, "temperature": 20}'}]
    tail = harmony.render(messages)[len(SYSTEM_MEDIUM):]
    # docs/format.md, "Handling tool calls" (minus its system and developer messages)
    assert tail == (
        "<|start|>user<|message|>What is the weather like in SF?<|end|><|start|>assistant"
        "<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>assistant"
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"location":"San Francisco"}<|call|><|start|>functions.get_weather to=assistant'
        '<|channel|>commentary<|message|>{"sunny": true, "temperature": 20}<|end|>'
        "<|start|>assistant")


def test_an_agent_turn_extends_the_previous_prompt_and_output():
    """The prompt cache's premise: the next prompt of a tool loop is the last prompt, then
    exactly what the model generated (analysis, call, `<|call|>`), then the output."""
    tools = WEATHER_TOOLS[1:2]
    first = [{"role": "user", "content": "Weather in Paris?"}]
    prompt = harmony.render(first, tools)
    arguments = {"location": "Paris"}
    generated = ("<|channel|>analysis<|message|>Call the tool.<|end|><|start|>assistant"
                 + harmony.call_header("functions.get_current_weather") + "<|message|>"
                 + json.dumps(arguments) + "<|call|>")
    second = [*first,
              {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
               "tool_calls": [{"type": "function", "id": "c", "function": {
                   "name": "get_current_weather", "arguments": arguments}}]},
              {"role": "tool", "tool_call_id": "c", "name": "get_current_weather",
               "content": "20 C"}]
    assert harmony.render(second, tools).startswith(prompt + generated)


def test_developer_and_system_messages_and_reasoning_effort():
    """Leading system/developer messages are the developer message's instructions, later ones
    developer messages in place; OpenAI's efforts map onto harmony's three."""
    text = harmony.render([{"role": "system", "content": "A"},
                           {"role": "developer", "content": "B"},
                           {"role": "user", "content": "hi"},
                           {"role": "system", "content": "C"}], reasoning_effort="xhigh")
    assert "Reasoning: high" in text
    assert "<|start|>developer<|message|># Instructions\n\nA\n\nB<|end|>" in text
    assert text.endswith("<|start|>user<|message|>hi<|end|><|start|>developer<|message|>C<|end|>"
                         "<|start|>assistant")
    assert "Reasoning: low" in harmony.render([], reasoning_effort="minimal")
    assert "Reasoning: medium" in harmony.render([], reasoning_effort=None)
    assert "Calls to these tools" not in harmony.render([])


def test_namespaced_tools_get_a_namespace_of_their_own():
    tools = [{"type": "function", "function": {"name": "browser.search", "description": "S.",
                                                "parameters": {"type": "object", "properties": {
                                                    "q": {"type": "string"}}}}}]
    text = harmony.render([], tools)
    assert "## browser\n\nnamespace browser {\n\n// S.\ntype search = (_: {\nq?: string,\n})" in text
    assert harmony.recipient("browser.search") == "browser.search"
    assert harmony.tool_name("functions.f") == "f" and harmony.tool_name("a.b") == "a.b"


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory) -> Path:
    return build_gpt_oss(tmp_path_factory.mktemp("gpt-oss"))


@pytest.fixture(scope="module")
def tokenizer(fixture_dir):
    from triode.model.loading import load

    return load(str(fixture_dir))[1]


def test_the_fixture_template_is_harmony_and_renders_as_triode_does(tokenizer):
    """The fixture's Jinja template (harmony's format, written from the guide) is detected as
    harmony and gives the renderer's text for a tool round trip."""
    assert detect_format(CHAT_TEMPLATE) == "harmony"
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
         "tool_calls": [{"type": "function", "id": "c", "function": {
             "name": "get_current_weather", "arguments": {"location": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c", "name": "get_current_weather", "content": "20"},
        {"role": "assistant", "content": "It is 20.", "reasoning_content": "dropped"},
        {"role": "user", "content": "Thanks"}]
    tools = WEATHER_TOOLS[1:3]
    jinja = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                          tokenize=False, reasoning_effort="low")
    assert jinja == harmony.render(messages, tools, reasoning_effort="low")


def test_the_loaded_fixture_stops_at_return_and_call(fixture_dir, tokenizer):
    from triode.model.loading import describe, load

    model, _ = load(str(fixture_dir))
    info = describe(str(fixture_dir), model, tokenizer, None)
    assert info.family.name == "harmony"
    assert {tokenizer.vocab["<|return|>"], tokenizer.vocab["<|call|>"]} <= set(info.eos_token_ids)


def test_the_next_prompt_extends_the_last_token_for_token(tokenizer):
    """With the model's tokens being the tokenizer's own encoding of what it wrote, the next
    prompt's tokens start with the last prompt's and the generated ones."""
    tools = WEATHER_TOOLS[1:2]
    first = [{"role": "user", "content": "Weather in Paris?"}]
    prompt = tokenizer.encode(harmony.render(first, tools), add_special_tokens=False)
    pieces = ["<|channel|>", "analysis", "<|message|>", "Call the tool.", "<|end|>", "<|start|>",
              "assistant", "<|channel|>", "commentary to=functions.get_current_weather ",
              "<|constrain|>", "json", "<|message|>", '{"location": "Paris"}', "<|call|>"]
    generated = [t for p in pieces for t in tokenizer.encode(p, add_special_tokens=False)]
    second = [*first,
              {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
               "tool_calls": [{"type": "function", "id": "c", "function": {
                   "name": "get_current_weather", "arguments": {"location": "Paris"}}}]},
              {"role": "tool", "tool_call_id": "c", "name": "get_current_weather",
               "content": "20 C"}]
    tokens = tokenizer.encode(harmony.render(second, tools), add_special_tokens=False)
    assert tokens[:len(prompt) + len(generated)] == prompt + generated


# ---- parsing --------------------------------------------------------------------------------

def parse_every_way(text: str) -> Outcome:
    """The one outcome of `text`, however it is sliced (asserted)."""
    outcomes = set()
    for chunks in chunkings(text):
        parser = make_parser("harmony", reasoning=False, starts_in_reasoning=False)
        events = [e for chunk in chunks for e in parser.feed(chunk)] + parser.finish()
        outcomes.add(collect(events))
    assert len(outcomes) == 1, outcomes
    return outcomes.pop()


ANALYSIS = "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic.<|end|>"
WEATHER_CALL = ('<|start|>assistant<|channel|>commentary to=functions.get_weather '
                '<|constrain|>json<|message|>{"location":"San Francisco"}')


def test_analysis_then_final():
    out = parse_every_way(ANALYSIS + "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.")
    assert out.reasoning == 'User asks: "What is 2 + 2?" Simple arithmetic.'
    assert out.text == "2 + 2 = 4." and out.calls == ()


def test_analysis_then_call():
    out = parse_every_way(ANALYSIS + WEATHER_CALL)
    assert out.reasoning.startswith("User asks") and out.text == ""
    assert out.call_values() == [("get_weather", {"location": "San Francisco"})]
    assert out.streamed == ('{"location":"San Francisco"}',)


def test_recipient_in_the_role_section_and_a_preamble():
    out = parse_every_way("<|channel|>commentary<|message|>Checking.<|end|>"
                          "<|start|>assistant to=functions.lookup<|channel|>commentary json"
                          '<|message|>{"q": "x"}')
    assert out.text == "Checking." and out.call_values() == [("lookup", {"q": "x"})]


def test_several_calls_and_other_namespaces():
    """`<|call|>` ends generation, but text that goes on (or a history parsed whole) keeps
    every call, each with its own index; `to=NS.NAME` keeps its namespace."""
    out = parse_every_way('<|channel|>commentary to=functions.a <|constrain|>json<|message|>'
                          '{"x": 1}<|call|><|start|>assistant<|channel|>commentary '
                          'to=browser.search<|constrain|>json<|message|>{"q": [1, 2]}<|call|>')
    assert out.call_values() == [("a", {"x": 1}), ("browser.search", {"q": [1, 2]})]


def test_incomplete_outputs():
    """Cut off mid-arguments: the call is closed with what parses; mid-header: markup,
    dropped; mid-analysis: the reasoning so far."""
    cut = parse_every_way(WEATHER_CALL[len("<|start|>assistant"):-4])
    assert cut.call_values() == [("get_weather", {"location": "San Francis"})]
    assert parse_every_way('<|channel|>commentary to=functions.f <|constrain|>json<|message|>'
                           '{"a": 1, "b": [2').call_values() == [("f", {"a": 1, "b": [2]})]
    header = parse_every_way("<|channel|>commentary to=functions.get_wea")
    assert header == Outcome("", "", (), ())
    assert parse_every_way("<|channel|>analysis<|message|>Thinking abo").reasoning == \
        "Thinking abo"


def test_malformed_outputs_never_show_markup():
    """A header that never reaches `<|message|>` is dropped; a message the model forgets to
    end is ended by the next `<|start|>` or `<|channel|>`; a tool's answer the model writes
    itself is dropped; stray special tokens are consumed; unusable arguments are `{}`."""
    assert parse_every_way("<|channel|>final<|end|><|start|>assistant<|channel|>final"
                           "<|message|>ok").text == "ok"
    out = parse_every_way("<|channel|>analysis<|message|>think<|channel|>final<|message|>a"
                          "<|constrain|>b<|endoftext|>c<|reserved_200013|>")
    assert (out.reasoning, out.text) == ("think", "abc")
    out = parse_every_way('<|channel|>commentary to=functions.f <|constrain|>json<|message|>'
                          'not json<|call|><|start|>functions.f to=assistant<|channel|>'
                          'commentary<|message|>{"made": "up"}<|end|>')
    assert out.call_values() == [("f", {})] and out.text == ""


def test_output_that_ignores_harmony_is_text():
    """A model that never opens a header wrote text: it is shown (markers still consumed)."""
    assert parse_every_way("Hello <b>there</b>").text == "Hello <b>there</b>"
    assert parse_every_way("to be or not").text == "to be or not"
    long_header = "<|channel|>" + "x" * 200
    assert parse_every_way(long_header).text == "x" * 200


def test_random_token_streams_never_leak_markup(tokenizer):
    """Whatever tokens a model emits, no harmony special token reaches text or reasoning, and
    every call ends with JSON object arguments (the collector checks the event order)."""
    rng = random.Random(7)
    vocab = list(range(len(tokenizer.vocab)))
    specials = [tokenizer.vocab[m] for m in _KNOWN if m in tokenizer.vocab]
    for _ in range(200):
        ids = [rng.choice(specials) if rng.random() < 0.2 else rng.choice(vocab)
               for _ in range(rng.randint(1, 60))]
        text = tokenizer.decode(ids)
        parser = make_parser("harmony", reasoning=False, starts_in_reasoning=False)
        events = [e for i in ids for e in parser.feed(tokenizer.decode([i]))] + parser.finish()
        shown = "".join(e.text for e in events if isinstance(e, (TextDelta, ReasoningDelta)))
        assert not any(m in shown for m in _KNOWN), (text, shown)
        collect(events)


# ---- grammars -------------------------------------------------------------------------------

TOOLS = [{"type": "function", "name": "get_weather", "parameters": {
            "type": "object", "properties": {
                "city": {"type": "string", "enum": ["Paris", "Rome"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["city", "days"], "additionalProperties": False}},
         {"type": "function", "name": "ns.other", "parameters": {"type": "object"}}]


def constrained_text(grammar, tokenizer, seed: int, limit: int = 300) -> str:
    """What a model with random logits writes under `grammar`, up to its stop token."""
    import mlx.core as mx

    processor = ConstrainedProcessor(grammar, tokenizer)
    rng = np.random.default_rng(seed)
    width = len(tokenizer.vocab)
    prompt = [0, 1, 2]
    tokens: list[int] = []
    for _ in range(limit):
        logits = mx.array(rng.normal(size=(1, width)).astype(np.float32))
        masked = np.array(processor(mx.array(prompt + tokens), logits))[0]
        token = int(np.argmax(masked))
        tokens.append(token)
        if token in tokenizer.eos_token_ids:   # the engine's stop tokens
            break
    processor(mx.array(prompt + tokens), mx.zeros((1, width)))
    assert processor.finished and processor.error is None
    return tokenizer.decode(tokens)


@pytest.mark.parametrize("seed", range(6))
def test_a_forced_call_parses_back_into_a_valid_call(tokenizer, seed):
    """Whatever the model picks inside the grammar (analysis or not), the output is one call
    to a declared tool with schema-valid arguments, ended by `<|call|>`."""
    grammar = harmony_tool_call_grammar(TOOLS, analysis_tokens=12)
    text = constrained_text(grammar, tokenizer, seed)
    assert text.endswith("<|call|>")
    out = parse_every_way(text[:-len("<|call|>")])
    ((name, arguments),) = out.call_values()
    assert out.text == ""
    schema = {t["name"]: t["parameters"] for t in TOOLS}[name]
    jsonschema.validate(arguments, schema)


def test_a_named_choice_calls_that_tool(tokenizer):
    grammar = harmony_tool_call_grammar(TOOLS, "get_weather", analysis_tokens=0)
    text = constrained_text(grammar, tokenizer, 0)
    assert text.startswith(harmony.call_header("functions.get_weather") + "<|message|>")


@pytest.mark.parametrize("seed", range(4))
def test_structured_output_is_the_final_message(tokenizer, seed):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                                "n": {"type": "integer", "minimum": 0,
                                                      "maximum": 99}},
              "required": ["ok", "n"], "additionalProperties": False}
    grammar = harmony_text_format_grammar({"type": "json_schema", "name": "r", "schema": schema},
                                          analysis_tokens=12)
    assert grammar is not None
    text = constrained_text(grammar, tokenizer, seed)
    assert text.endswith("<|return|>")
    jsonschema.validate(json.loads(parse_every_way(text[:-len("<|return|>")]).text), schema)


def test_the_grammar_accepts_the_rendered_call(tokenizer):
    """A call as the renderer writes it into history is a sentence of the forced grammar."""
    import mlx.core as mx

    grammar = harmony_tool_call_grammar(TOOLS, analysis_tokens=50)
    processor = ConstrainedProcessor(grammar, tokenizer)
    text = ("<|channel|>analysis<|message|>Use it.<|end|><|start|>assistant"
            + harmony.call_header("functions.get_weather") + "<|message|>"
            + json.dumps({"city": "Rome", "days": 2}) + "<|call|>")
    context = [0]
    width = len(tokenizer.vocab)
    for token in tokenizer.encode(text, add_special_tokens=False):
        processor(mx.array(context), mx.zeros((1, width)))
        assert processor.allowed_tokens(width)[token], tokenizer.decode([token])
        context.append(token)
    processor(mx.array(context), mx.zeros((1, width)))
    assert processor.finished and processor.error is None


def test_the_analysis_budget_leaves_room_for_the_call():
    assert harmony_analysis_tokens(None) == 1024
    assert harmony_analysis_tokens(100) == 50
    assert "analysis" not in harmony_tool_call_grammar(TOOLS, analysis_tokens=0).lark
