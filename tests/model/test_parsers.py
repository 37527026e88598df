"""Streaming tool-call and reasoning parsers: every format, fed in every way."""

from __future__ import annotations

import json
import random
from typing import Any, Iterator

import attrs
import pytest

from triode.model.families import detect_format, make_parser
from triode.model.parsers import (ReasoningDelta, ReasoningDone, TextDelta, ToolCallDelta,
                                  ToolCallDone, ToolCallStart)
from training.tiny.template import CHAT_TEMPLATE

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TRICKY_ARGUMENTS = {
    "path": "src/a.py",
    "content": 'if x < 3:\n    print("}")\n',
    "options": {"lines": [1, 2.5, {"deep": True, "none": None}], "note": 'say "hi" {'},
}


@attrs.frozen
class Outcome:
    """What a consumer makes of a turn's events, whatever their slicing."""

    text: str
    reasoning: str
    calls: tuple[tuple[str, str], ...]  # (name, final arguments)
    streamed: tuple[str, ...]  # each call's argument deltas, concatenated

    def call_values(self) -> list[tuple[str, Any]]:
        return [(name, json.loads(arguments)) for name, arguments in self.calls]


def collect(events: list) -> Outcome:
    """Folds events into an Outcome, checking the order every consumer relies on."""
    text, reasoning, calls, streamed = [], [], [], []
    reasoning_done, open_call = None, None
    for event in events:
        match event:
            case ReasoningDelta(piece):
                assert reasoning_done is None and not text and not calls and open_call is None
                reasoning.append(piece)
            case ReasoningDone(full):
                assert reasoning_done is None and full == "".join(reasoning) != ""
                reasoning_done = full
            case TextDelta(piece):
                assert piece and open_call is None
                text.append(piece)
            case ToolCallStart(index, name):
                assert open_call is None and index == len(calls)
                open_call = (index, name)
                streamed.append("")
            case ToolCallDelta(index, arguments):
                assert open_call is not None and index == open_call[0] and arguments
                streamed[index] += arguments
            case ToolCallDone(index, name, arguments):
                assert open_call == (index, name)
                assert isinstance(json.loads(arguments), dict)
                assert arguments == json.dumps(json.loads(arguments), ensure_ascii=False)
                calls.append((name, arguments))
                open_call = None
    assert open_call is None
    assert (reasoning_done is None) == (not reasoning)
    return Outcome("".join(text), "".join(reasoning), tuple(calls), tuple(streamed))


def chunkings(text: str) -> Iterator[list[str]]:
    yield [text]
    yield list(text)
    for cut in range(1, len(text)):
        yield [text[:cut], text[cut:]]
    rng = random.Random(0)
    for _ in range(5):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, 12)))
        yield [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)])]


def parse(format_name: str, chunks: list[str], *, reasoning: bool = False,
          starts_in_reasoning: bool = False) -> list:
    parser = make_parser(format_name, reasoning=reasoning,
                         starts_in_reasoning=starts_in_reasoning)
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.finish()


def parse_every_way(format_name: str, text: str, **flags: bool) -> Outcome:
    """Parses `text` in one chunk, char by char, split in two everywhere and cut at random;
    asserts every chunking gives the same outcome, and returns it."""
    expected = collect(parse(format_name, [text], **flags))
    for chunks in chunkings(text):
        assert collect(parse(format_name, chunks, **flags)) == expected, chunks
    return expected


def assert_streamed_final_arguments(outcome: Outcome) -> None:
    """Each call streamed, and its deltas are JSON for the same object as its final arguments."""
    assert len(outcome.streamed) == len(outcome.calls)
    for streamed, (_, arguments) in zip(outcome.streamed, outcome.calls):
        assert streamed and json.loads(streamed, strict=False) == json.loads(arguments)


# One renderer per way a format writes calls (Mistral has two), as the model would write them.

def qwen3_coder_call(name: str, arguments: dict) -> str:
    parameters = "".join(
        f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n"
        "</parameter>\n" for key, value in arguments.items())
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


def render(style: str, text: str, calls: list[tuple[str, dict]]) -> str:
    if style == "hermes":
        blocks = [f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": '
                  f'{json.dumps(arguments)}}}\n</tool_call>' for name, arguments in calls]
        return "\n".join([text, *blocks] if text else blocks)
    if style == "qwen3_coder":
        blocks = [qwen3_coder_call(name, arguments) for name, arguments in calls]
        return "\n".join([text, *blocks] if text else blocks)
    if style == "mistral":
        return text + "".join(f"[TOOL_CALLS]{name}[ARGS]{json.dumps(arguments)}"
                              for name, arguments in calls)
    if style == "mistral_list":
        return text + "[TOOL_CALLS]" + json.dumps(
            [{"name": name, "arguments": arguments} for name, arguments in calls])
    assert style == "llama3"
    return text + ("<|python_tag|>" if text else "") + "; ".join(
        json.dumps({"name": name, "parameters": arguments}) for name, arguments in calls)


STYLES = ["hermes", "qwen3_coder", "mistral", "mistral_list", "llama3"]
FORMAT_OF = {"mistral_list": "mistral"}


def format_of(style: str) -> str:
    return FORMAT_OF.get(style, style)


@pytest.mark.parametrize("format_name", ["hermes", "qwen3_coder", "mistral", "llama3", "none"])
def test_plain_text_passes_through(format_name):
    """Text without calls comes out unchanged, brackets and angle brackets included."""
    text = "Plain answer: 3 < 4, [x] and {y}.\n\nDone <tool"
    outcome = parse_every_way(format_name, text)
    assert outcome == Outcome(text, "", (), ())


@pytest.mark.parametrize("style", STYLES)
def test_text_then_one_call(style):
    """Text before a call is the message, without the separator; the call streams."""
    outcome = parse_every_way(format_of(style),
                              render(style, "Let me check.", [("get_weather", {"city": "Paris"})]))
    assert outcome.text == "Let me check."
    assert outcome.call_values() == [("get_weather", {"city": "Paris"})]
    assert_streamed_final_arguments(outcome)


@pytest.mark.parametrize("style", STYLES)
def test_two_calls(style):
    """Two calls in a row get indices 0 and 1 and leave no text behind."""
    calls = [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "CET", "utc": False})]
    outcome = parse_every_way(format_of(style), render(style, "", calls))
    assert outcome.text == ""
    assert outcome.call_values() == calls
    assert_streamed_final_arguments(outcome)


@pytest.mark.parametrize("style", STYLES)
def test_nested_arguments_with_delimiters_in_strings(style):
    """Nested objects and arrays, and strings holding `}`, `"`, newlines and `<`, survive."""
    outcome = parse_every_way(format_of(style),
                              render(style, "", [("write_file", TRICKY_ARGUMENTS)]))
    assert outcome.call_values() == [("write_file", TRICKY_ARGUMENTS)]
    assert_streamed_final_arguments(outcome)


@pytest.mark.parametrize("style", STYLES)
def test_unterminated_call_is_closed_at_finish(style):
    """A call cut off inside a string value is closed with what was generated so far."""
    full = render(style, "", [("get_weather", {"city": "Paris", "unit": "celsius"})])
    cut = full[:full.index("celsius") + len("cel")]
    outcome = parse_every_way(format_of(style), cut)
    assert outcome.text == ""
    assert outcome.call_values() == [("get_weather", {"city": "Paris", "unit": "cel"})]
    assert_streamed_final_arguments(outcome)


@pytest.mark.parametrize("style", STYLES)
def test_reasoning_then_call(style):
    """A think block becomes reasoning; the call after it is parsed as usual."""
    text = "<think>\nThe user wants weather.\n</think>\n\n" + render(
        style, "", [("get_weather", {"city": "Paris"})])
    outcome = parse_every_way(format_of(style), text, reasoning=True)
    assert outcome.reasoning == "The user wants weather."
    assert outcome.text == ""
    assert outcome.call_values() == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("style", STYLES)
def test_starts_in_reasoning_then_text_and_call(style):
    """With the prompt ending inside <think>, output is reasoning from the first token."""
    text = "Paris, surely.\n</think>\n\n" + render(style, "Checking.",
                                                  [("get_weather", {"city": "Paris"})])
    outcome = parse_every_way(format_of(style), text, starts_in_reasoning=True)
    assert outcome.reasoning == "Paris, surely."
    assert outcome.text == "Checking."
    assert outcome.call_values() == [("get_weather", {"city": "Paris"})]


def test_hermes_bundled_model_output():
    """The bundled model's own call streams its arguments verbatim."""
    outcome = parse_every_way("hermes", WEATHER)
    assert outcome == Outcome("", "", (("get_weather", '{"city": "Paris"}'),),
                              ('{"city": "Paris"}',))


def test_hermes_arguments_stream_while_generated():
    """The call starts once its name is known and arguments flow before the call closes."""
    parser = make_parser("hermes", reasoning=False, starts_in_reasoning=False)
    assert parser.feed("Sure") == [TextDelta("Sure")]
    assert parser.feed('\n<tool_call>\n{"name": "get_weather", "arguments": {"ci') == [
        ToolCallStart(0, "get_weather"), ToolCallDelta(0, '{"ci')]
    assert parser.feed('ty": "Paris"}}\n</tool') == [
        ToolCallDelta(0, 'ty": "Paris"}'), ToolCallDone(0, "get_weather", '{"city": "Paris"}')]
    assert parser.feed("_call>") == []
    assert parser.finish() == []


def test_only_a_possible_marker_is_held_back():
    """A trailing `<to` waits until it cannot be `<tool_call>`; nothing more is held."""
    parser = make_parser("hermes", reasoning=False, starts_in_reasoning=False)
    assert parser.feed("Hello <to") == [TextDelta("Hello")]
    assert parser.feed("day") == [TextDelta(" <today")]
    assert parser.finish() == []


def test_hermes_name_after_arguments_is_announced_without_streaming():
    """Arguments that come before the name cannot stream; the call still completes."""
    text = '<tool_call>\n{"arguments": {"city": "Paris"}, "name": "get_weather"}\n</tool_call>'
    outcome = parse_every_way("hermes", text)
    assert outcome.call_values() == [("get_weather", {"city": "Paris"})]
    assert outcome.streamed == ("",)


def test_hermes_string_encoded_arguments_are_decoded():
    """Arguments written as a JSON string are decoded, and not streamed as raw text."""
    text = '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}' \
           '\n</tool_call>'
    outcome = parse_every_way("hermes", text)
    assert outcome.call_values() == [("get_weather", {"city": "Paris"})]
    assert outcome.streamed == ("",)


def test_hermes_cut_off_member_is_dropped():
    """A call cut off inside a value that cannot be closed keeps its complete members."""
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "metric": tr'
    outcome = parse_every_way("hermes", text)
    assert outcome.call_values() == [("get_weather", {"city": "Paris"})]


def test_hermes_call_cut_off_before_arguments_has_empty_arguments():
    """A call whose name arrived but whose arguments never began completes with `{}`."""
    outcome = parse_every_way("hermes", '<tool_call>\n{"name": "get_weather", "argu')
    assert outcome.calls == (("get_weather", "{}"),)


def test_hermes_call_cut_off_before_its_name_is_dropped():
    """Without a name there is no call, and its markup is not shown as text."""
    outcome = parse_every_way("hermes", 'Sure.\n<tool_call>\n{"na')
    assert outcome == Outcome("Sure.", "", (), ())


def test_hermes_block_that_is_not_json_is_dropped():
    """A tool-call block holding no JSON object is markup: dropped, text after it kept."""
    outcome = parse_every_way("hermes", "<tool_call>\nget_weather(Paris)\n</tool_call>\nAfter.")
    assert outcome == Outcome("After.", "", (), ())


def test_hermes_stray_closing_tag_is_dropped():
    """A `</tool_call>` outside a call never reaches the text."""
    outcome = parse_every_way("hermes", "One.\n</tool_call>\nTwo.")
    assert outcome.text == "One.Two."


def test_qwen3_coder_deltas_are_exactly_the_arguments():
    """The JSON built from XML parameters streams member by member to the final string."""
    text = qwen3_coder_call("write_file", TRICKY_ARGUMENTS)
    outcome = parse_every_way("qwen3_coder", text)
    assert outcome.streamed == tuple(arguments for _, arguments in outcome.calls)


def test_qwen3_coder_parameter_values():
    """Numbers, booleans, null and JSON containers are typed; anything else stays text."""
    text = ("<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=x>\n1.5\n"
            "</parameter>\n<parameter=b>\ntrue\n</parameter>\n<parameter=z>\nnull\n</parameter>"
            '\n<parameter=s>\n"quoted"\n</parameter>\n<parameter=w>\nNaN\n</parameter>\n'
            "<parameter=l>\n[1, 2]\n</parameter>\n</function>\n</tool_call>")
    outcome = parse_every_way("qwen3_coder", text)
    assert outcome.call_values() == [("f", {"n": 42, "x": 1.5, "b": True, "z": None,
                                            "s": '"quoted"', "w": "NaN", "l": [1, 2]})]


def test_qwen3_coder_missing_parameter_close():
    """A value left without </parameter> ends at the next tag."""
    text = ("<tool_call>\n<function=f>\n<parameter=a>\none\n<parameter=b>\ntwo\n</function>\n"
            "</tool_call>")
    outcome = parse_every_way("qwen3_coder", text)
    assert outcome.call_values() == [("f", {"a": "one", "b": "two"})]
    assert outcome.streamed == ('{"a": "one", "b": "two"}',)


def test_qwen3_coder_call_without_parameters():
    """A function with no parameters has `{}` as arguments."""
    outcome = parse_every_way("qwen3_coder",
                              "<tool_call>\n<function=now>\n</function>\n</tool_call>")
    assert outcome == Outcome("", "", (("now", "{}"),), ("{}",))


def test_qwen3_coder_call_cut_off_in_a_closing_tag():
    """A closing tag cut off at finish is not part of the value."""
    text = "<tool_call>\n<function=f>\n<parameter=a>\nvalue\n</param"
    outcome = parse_every_way("qwen3_coder", text)
    assert outcome.calls == (("f", '{"a": "value"}'),)


def test_mistral_args_calls_without_repeated_marker():
    """`[TOOL_CALLS]a[ARGS]{...}b[ARGS]{...}` is two calls, and text after them is text."""
    text = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}get_time[ARGS]{}\n\nDone.'
    outcome = parse_every_way("mistral", text)
    assert outcome.text == "Done."
    assert outcome.call_values() == [("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert_streamed_final_arguments(outcome)


def test_mistral_marker_without_a_call_leaves_its_text():
    """`[TOOL_CALLS]` followed by prose drops only the marker."""
    outcome = parse_every_way("mistral", "[TOOL_CALLS]no call here")
    assert outcome == Outcome("no call here", "", (), ())


def test_llama3_json_answer_is_text():
    """A JSON object whose first key is not "name" or "type" is an answer, not a call."""
    text = '{"answer": 42, "name": "x"}'
    assert parse_every_way("llama3", text) == Outcome(text, "", (), ())


def test_llama3_call_opening_with_type():
    """`{"type": "function", "name": ..., "parameters": ...}` is a call too."""
    text = '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}'
    outcome = parse_every_way("llama3", text)
    assert outcome.call_values() == [("get_weather", {"city": "Paris"})]
    assert_streamed_final_arguments(outcome)


def test_reasoning_then_text():
    """The template's newlines around reasoning and after `</think>` are in neither part."""
    text = "<think>\nline one\n\nline two\n</think>\n\nThe answer."
    outcome = parse_every_way("hermes", text, reasoning=True)
    assert outcome == Outcome("The answer.", "line one\n\nline two", (), ())


def test_separator_after_think_end_is_stripped():
    """`a</think>\\n\\nb` is reasoning `a` and text `b`."""
    outcome = parse_every_way("none", "a</think>\n\nb", starts_in_reasoning=True)
    assert outcome == Outcome("b", "a", (), ())


def test_think_start_repeated_inside_an_open_block_is_markup():
    """With the prompt ending inside <think>, a `<think>` the model writes again is dropped."""
    outcome = parse_every_way("none", "<think>\nabc\n</think>\n\nb", starts_in_reasoning=True)
    assert outcome == Outcome("b", "abc", (), ())


def test_reasoning_cut_off_at_finish_is_closed():
    """Reasoning that never reached `</think>` still ends with its done event."""
    outcome = parse_every_way("hermes", "<think>\nstill thinking", reasoning=True)
    assert outcome == Outcome("", "still thinking", (), ())


def test_empty_think_block_gives_no_reasoning():
    """`<think>\\n\\n</think>` (thinking switched off) produces no reasoning events."""
    outcome = parse_every_way("hermes", "<think>\n\n</think>\n\nHi.", reasoning=True)
    assert outcome == Outcome("Hi.", "", (), ())


def test_think_block_is_text_when_reasoning_is_off():
    """Without `reasoning`, think tags are ordinary text."""
    text = "<think>x</think>y"
    assert parse_every_way("hermes", text) == Outcome(text, "", (), ())


def test_reasoning_events_come_before_the_rest():
    """Reasoning deltas, then its done event, then text, in one feed."""
    parser = make_parser("hermes", reasoning=True, starts_in_reasoning=False)
    assert parser.feed("<think>\nhm\n</think>\n\nOk") == [
        ReasoningDelta("hm"), ReasoningDone("hm"), TextDelta("Ok")]


@pytest.mark.parametrize(("template", "format_name"), [
    (CHAT_TEMPLATE, "hermes"),
    ("{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}", "qwen3_coder"),
    ("{{- '[TOOL_CALLS]' + tool_call.name + '[ARGS]' }}", "mistral"),
    ("{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}", "llama3"),
    ("{{- '<|python_tag|>' }}", "llama3"),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", "generic"),
    (None, "generic"),
])
def test_detect_format(template, format_name):
    """The format follows from the markers a chat template renders; a template without any
    gets triode's generic envelope (docs/tools.md)."""
    assert detect_format(template) == format_name


def test_unknown_format_is_refused():
    """Asking for a format that does not exist is an error that names the known ones."""
    with pytest.raises(ValueError, match="hermes"):
        make_parser("no_such_format", reasoning=False, starts_in_reasoning=False)
