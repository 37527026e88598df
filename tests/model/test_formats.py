"""The tool-call formats mlx-lm parses, beyond the four that stream: detection as mlx-lm
detects them, and canonical texts of each (one call, several, after reasoning, cut off,
malformed), fed in every chunking."""

from __future__ import annotations

import json
from typing import Any

import pytest

from triode.model.families import (WholeCalls, canonical_format, detect_format, family_for,
                                   format_names, make_parser)
from triode.model.parsers import TextDelta, ToolCallDelta, ToolCallDone
from triode.model.parsers.whole import mlx_format_names, mlx_module
from training.tiny.template import CHAT_TEMPLATE

from ..fixtures.families import FAMILIES, tokenizer_json
from .test_parsers import Outcome, chunkings, collect

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}, "utc": {"type": "boolean"}}}}},
]
PARIS = ("get_weather", {"city": "Paris", "days": 2})
TOKYO = ("get_time", {"zone": "JST", "utc": False})


def text_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def gemma4_value(value: Any) -> str:
    if isinstance(value, str):
        return f'<|"|>{value}<|"|>'
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma4_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma4_value(v) for v in value) + "]"
    return json.dumps(value)


def render(fmt: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Calls as a model of the format writes them (its chat template renders them so)."""
    if fmt in ("glm47", "laguna", "longcat"):
        p = "longcat_" if fmt == "longcat" else ""
        return "\n".join(
            f"<{p}tool_call>{name}" + "".join(
                f"\n<{p}arg_key>{k}</{p}arg_key>\n<{p}arg_value>{text_value(v)}</{p}arg_value>"
                for k, v in args.items()) + f"\n</{p}tool_call>" for name, args in calls)
    if fmt == "kimi_k2":
        return "<|tool_calls_section_begin|>" + "".join(
            f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>"
            f"{json.dumps(args)}<|tool_call_end|>" for i, (name, args) in enumerate(calls)) \
            + "<|tool_calls_section_end|>"
    if fmt == "kimi_k3":
        return "<|open|>tools<|sep|>" + "".join(
            f'<|open|>call tool="{name}" index="{i + 1}"<|sep|><|open|>json type="object"'
            f"<|sep|>{json.dumps(args)}<|close|>json<|sep|><|close|>call<|sep|>"
            for i, (name, args) in enumerate(calls)) + "<|close|>tools<|sep|>"
    if fmt == "minimax_m2":
        return "<minimax:tool_call>\n" + "".join(
            f'<invoke name="{name}">\n' + "".join(
                f'<parameter name="{k}">{text_value(v)}</parameter>\n' for k, v in args.items())
            + "</invoke>\n" for name, args in calls) + "</minimax:tool_call>"
    if fmt == "minicpm5":
        return "\n".join(f'<function name="{name}">' + "".join(
            f'<param name="{k}">{text_value(v)}</param>' for k, v in args.items())
            + "</function>" for name, args in calls)
    if fmt == "muse_spark":
        return "<atem:function_calls>\n" + "".join(
            f'<atem:invoke name="{name}">\n' + "".join(
                f'<atem:parameter name="{k}">{json.dumps(v)}</atem:parameter>\n'
                for k, v in args.items()) + "</atem:invoke>\n" for name, args in calls) \
            + "</atem:function_calls>"
    if fmt == "gemma4":
        return "".join(f"<|tool_call>call:{name}{gemma4_value(args)}<tool_call|>"
                       for name, args in calls)
    if fmt == "function_gemma":
        return "".join(
            f"<start_function_call>call:{name}{{" + ",".join(
                f"{k}:<escape>{v}<escape>" if isinstance(v, str) else f"{k}:{json.dumps(v)}"
                for k, v in args.items()) + "}<end_function_call>" for name, args in calls)
    assert fmt == "pythonic"
    return "<|tool_call_start|>[" + ", ".join(
        f"{name}(" + ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items()) + ")"
        for name, args in calls) + "]<|tool_call_end|>"


WHOLE = [f for f in format_names() if isinstance(family_for(f), WholeCalls)]
THINK = {"gemma4": ("<|channel>thought", "<channel|>"),
         "kimi_k3": ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
         "longcat": ("<longcat_think>", "</longcat_think>")}


def parse(fmt: str, chunks: list[str], **flags: Any) -> list:
    parser = make_parser(fmt, tools=TOOLS, think=THINK.get(fmt, ("<think>", "</think>")),
                         reasoning=flags.get("reasoning", False),
                         starts_in_reasoning=flags.get("starts_in_reasoning", False))
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.finish()


def parse_every_way(fmt: str, text: str, **flags: Any) -> Outcome:
    """As test_parsers.parse_every_way, with the tools the formats type arguments by."""
    expected = collect(parse(fmt, [text], **flags))
    for chunks in chunkings(text):
        assert collect(parse(fmt, chunks, **flags)) == expected, chunks
    return expected


def test_every_installed_mlx_format_is_served():
    """Each tool_parsers module of the installed mlx-lm is a format triode parses."""
    assert set(mlx_format_names()) - {"json_tools"} <= set(format_names())
    assert canonical_format("json_tools") == "hermes"
    assert {"glm47", "kimi_k2", "minimax_m2", "gemma4", "pythonic"} <= set(WHOLE)


@pytest.mark.parametrize("fmt", WHOLE)
def test_text_then_one_call(fmt):
    """Text before the call is the message; the call comes out whole, typed by the schema."""
    outcome = parse_every_way(fmt, "Let me check.\n" + render(fmt, [PARIS]))
    assert outcome.text == "Let me check."
    assert outcome.call_values() == [PARIS]
    assert outcome.streamed == ("",)     # whole: no argument deltas before the call's end


@pytest.mark.parametrize("fmt", WHOLE)
def test_several_calls(fmt):
    """Several calls (one block or several, as the format writes them) in order."""
    outcome = parse_every_way(fmt, render(fmt, [PARIS, TOKYO]))
    assert outcome.text == ""
    assert outcome.call_values() == [PARIS, TOKYO]


@pytest.mark.parametrize("fmt", WHOLE)
def test_calls_after_reasoning(fmt):
    """The model's reasoning block first, then its call; reasoning markers are the model's."""
    start, end = THINK.get(fmt, ("<think>", "</think>"))
    outcome = parse_every_way(fmt, f"{start}\nweather for Paris\n{end}\n\n" + render(fmt, [PARIS]),
                              reasoning=True)
    assert outcome.reasoning == "weather for Paris"
    assert outcome.text == ""
    assert outcome.call_values() == [PARIS]


@pytest.mark.parametrize("fmt", WHOLE)
def test_call_cut_off_in_a_value_keeps_its_name(fmt):
    """A block the token limit cut off is completed as the format closes it: the call keeps
    its name (and what of its arguments can be read); no markup becomes text."""
    full = render(fmt, [("get_weather", {"city": "Parisian"})])
    cut = full[:full.index("Parisian") + len("Pari")]
    outcome = parse_every_way(fmt, cut)
    assert outcome.text == ""
    [(name, arguments)] = outcome.call_values()
    assert name == "get_weather" and arguments in ({}, {"city": "Pari"})


@pytest.mark.parametrize("fmt", WHOLE)
def test_malformed_block_is_never_text(fmt):
    """A block no parse accepts is dropped (with a log line), the text around it kept."""
    marker = mlx_module(fmt).tool_call_start
    assert marker in render(fmt, [PARIS])
    outcome = parse_every_way(fmt, f"Before. {marker}???")
    assert outcome.text == "Before."
    assert all(name != "???" for name, _ in outcome.calls)


@pytest.mark.parametrize("fmt", ["glm47", "minimax_m2", "longcat"])
def test_string_typed_arguments_stay_strings(fmt):
    """Where the format writes values as text, the schema decides: `007` for a string
    parameter is a string, `2` for an integer one a number."""
    outcome = parse_every_way(fmt, render(fmt, [("get_weather", {"city": "007", "days": 2})]))
    assert outcome.call_values() == [("get_weather", {"city": "007", "days": 2})]


def test_glm_call_right_after_text_without_newline():
    """GLM 4.7 writes the name right after the opener and values without newlines."""
    outcome = parse_every_way("glm47", "OK<tool_call>get_time<arg_key>zone</arg_key>"
                              "<arg_value>CET</arg_value></tool_call>")
    assert outcome.text == "OK"
    assert outcome.call_values() == [("get_time", {"zone": "CET"})]


def test_qwen3_coder_call_without_its_opener_is_a_call():
    """A Qwen3-Coder model that leaves out <tool_call> (ollama#18530, vllm#22975) still
    makes a call, never text; its arguments still stream."""
    text = "Sure.\n<function=get_weather>\n<parameter=city>\n007\n</parameter>\n</function>"
    outcome = collect(parse("qwen3_coder", list(text)))
    assert outcome.text == "Sure."
    assert outcome.call_values() == [("get_weather", {"city": "007"})]
    assert outcome.streamed == ('{"city": "007"}',)


def test_qwen3_coder_bare_calls_back_to_back():
    text = ("<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n"
            "<function=get_time>\n</function>")
    assert collect(parse("qwen3_coder", [text])).call_values() == [
        ("get_weather", {"days": 3}), ("get_time", {})]


def test_whole_calls_are_announced_only_at_their_end():
    """Nothing of a whole call is emitted while its block is open."""
    parser = make_parser("glm47", reasoning=False, starts_in_reasoning=False, tools=TOOLS)
    assert parser.feed("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa") == []
    events = parser.feed("ris</arg_value>\n</tool_call>") + parser.finish()
    assert [type(e) for e in events] == [type(e) for e in events
                                         if not isinstance(e, (TextDelta, ToolCallDelta))]
    assert isinstance(events[-1], ToolCallDone) and json.loads(events[-1].arguments) == {
        "city": "Paris"}


def test_kimi_k3_structural_markup_is_never_text():
    """Kimi K3's think block is reasoning by its own markers, and the response block around
    its reply is markup, not text."""
    outcome = parse_every_way("kimi_k3", "<|open|>think<|sep|>hm<|close|>think<|sep|>"
                              "<|open|>response<|sep|>Tokyo time:<|close|>response<|sep|>"
                              + render("kimi_k3", [TOKYO]) + "<|close|>message<|sep|>",
                              reasoning=True)
    assert (outcome.reasoning, outcome.text) == ("hm", "Tokyo time:")
    assert outcome.call_values() == [TOKYO]


# ---- detection ---------------------------------------------------------------------------

def test_glm_template_is_glm47_not_hermes():
    """A GLM template contains <tool_call> too; mlx-lm's order reads it as glm47."""
    template = FAMILIES["glm"].template
    assert "<tool_call>" in template
    assert detect_format(template) == "glm47"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_is_detected_as_mlx_lm_detects_it(family):
    """The fixture's template, vocabulary and config give the family's format."""
    f = FAMILIES[family]
    vocab = {t["content"]: t["id"] for t in tokenizer_json(f)["added_tokens"]}
    assert detect_format(f.template, vocab,
                         configured=f.tokenizer_config.get("tool_parser_type")) == f.tool_format


@pytest.mark.parametrize(("template", "format_name"), [
    (CHAT_TEMPLATE, "hermes"),               # no `tool_call.name`: triode's own markers
    ("{{ '<tool_call>' + tool_call.name }}", "hermes"),          # mlx-lm's json_tools
    ("<minimax:tool_call>", "minimax_m2"),
    ("<|tool_call> <tool_call|>", "gemma4"),
    ("<start_function_call>", "function_gemma"),
    ("<|tool_list_start|>", "pythonic"),
    ("<|tool_calls_section_begin|>", "kimi_k2"),
    ('<function name="f"><param name="k">', "minicpm5"),
    ("<atem:function_calls>", "muse_spark"),
    ("<longcat_tool_call>", "longcat"),
])
def test_template_markers(template, format_name):
    assert detect_format(template) == format_name


def test_vocabulary_alone_names_kimi_k3():
    """Kimi K3's template need not name its markup: its XTML vocabulary does."""
    vocab = {t: i for i, t in enumerate(("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"))}
    assert detect_format("{{ messages }}", vocab) == "kimi_k3"


def test_configured_parser_wins():
    """A tokenizer config's tool_parser_type (Laguna's) is taken as mlx-lm takes it."""
    assert detect_format(FAMILIES["glm"].template, configured="laguna") == "laguna"


def test_unknown_configured_format_is_refused():
    with pytest.raises(ValueError, match="glm47"):
        canonical_format("no_such_format")
