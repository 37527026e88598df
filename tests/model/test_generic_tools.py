"""triode's generic tool envelope, for models whose chat template has no tools
(docs/tools.md): how tools, past calls and tool outputs are shown to the model, how the
envelope is parsed back (streamed, whatever the chunking), and forced calls in it.

The template is SmolLM2-Instruct's (as its GGUF carries it: ChatML, a default system
prompt, no tools); its tokenizer is the bundled BPE with ChatML's special tokens, so
`<tool_call>` is plain text there too."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
import trio

from triode.errors import InvalidRequest
from triode.model.generic_tools import present, tools_text
from triode.model.loading import ModelInfo
from triode.model.families import (canonical_format, detect_format, family_for, format_names,
                                   make_parser)
from triode.model.parsers import ToolCallDone
from triode.model.templates import probe_roles, render_fitted

from ..fixtures.families import Family
from .test_call_grammars import CUSTOM, EMPTY, NESTED, WEATHER, Sampler, check_calls
from .test_parsers import (TRICKY_ARGUMENTS, assert_streamed_final_arguments, parse_every_way,
                           render)
from .test_templates import renderer

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
CHATML = Family(name="chatml", model_type="llama", config={}, template=SMOLLM2_TEMPLATE,
                special=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
                eos=("<|im_end|>",), tool_format="generic")
# A template in Gemma's manner that refuses `system` altogether.
NO_SYSTEM = (
    "{% for m in messages %}{% if m.role == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

CHAT_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a location",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                   "required": ["location"]}}}
SIGNATURE = json.dumps(CHAT_WEATHER)


def generic_render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   family: Family = CHATML) -> str:
    """What ModelHandle.render does for the generic format, without the actor."""
    render = renderer(family)
    return render_fitted(render, present(messages, tools), probe_roles(render))


def call_message(name: str, arguments: Any, content: str = "") -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"type": "function", "id": "call_1", "function": {"name": name,
                                                            "arguments": arguments}}]}


# ---- when generic is chosen -------------------------------------------------------------------

def test_a_template_without_tools_gets_the_generic_format():
    """SmolLM2's template has no tools block and nothing names a format: `generic`. A
    template with markers keeps its format, and `none` stays a format one can ask for."""
    assert detect_format(SMOLLM2_TEMPLATE, {"<|im_start|>": 1, "<|im_end|>": 2}) == "generic"
    assert detect_format(SMOLLM2_TEMPLATE, configured="hermes") == "hermes"
    assert detect_format("{{- '<tool_call>\\n' + tool_call.name }}") == "hermes"
    assert {"generic", "none"} <= set(format_names())
    assert canonical_format("generic") == "generic"


# ---- rendering --------------------------------------------------------------------------------

def test_tools_are_described_in_a_new_system_message():
    """Without instructions, the tools make the system message (the template's default one
    is not rendered then): the instruction, one JSON line per tool within <tools>, and the
    envelope."""
    text = generic_render([{"role": "user", "content": "Weather in Paris?"}], [CHAT_WEATHER])
    assert text == ("<|im_start|>system\n" + tools_text([CHAT_WEATHER]) + "<|im_end|>\n"
                    "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    assert f"<tools>\n{SIGNATURE}\n</tools>" in text
    assert '<tool_call>\n{"name": "func_name1", "arguments": {' in text
    assert "SmolLM" not in text


def test_tools_follow_the_instructions_in_the_leading_system_message():
    text = generic_render([{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": "Hi"}], [CHAT_WEATHER])
    assert text.startswith("<|im_start|>system\nBe brief.\n\n" + tools_text([CHAT_WEATHER])
                           + "<|im_end|>\n<|im_start|>user\nHi<|im_end|>")


def test_a_template_that_refuses_system_gets_the_tools_in_the_first_user_message():
    """Template hygiene applies to the tools' text as to any system text."""
    family = Family(name="nosys", model_type="llama", config={}, template=NO_SYSTEM,
                    special=CHATML.special, eos=CHATML.eos)
    assert not probe_roles(renderer(family)).system
    text = generic_render([{"role": "user", "content": "Hi"}], [CHAT_WEATHER], family)
    assert text.startswith("<|im_start|>user\n" + tools_text([CHAT_WEATHER]) + "\n\nHi<|im_end|>")


def test_no_tools_no_tool_text():
    """tool_choice none (the template gets no tools) or no tools: the messages as they are."""
    messages = [{"role": "user", "content": "Hi"}]
    assert present(messages, None) == present(messages, []) == messages
    assert "<tools>" not in generic_render(messages, [])


def test_past_calls_render_as_the_envelope_and_outputs_as_user_messages():
    """An assistant's calls become its text (after what it said), one block each; the tool
    outputs that follow become one user message of <tool_response> blocks."""
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"type": "function", "id": "c1",
             "function": {"name": "get_weather", "arguments": {"location": "Paris"}}},
            {"type": "function", "id": "c2",
             "function": {"name": "get_weather", "arguments": {"location": "Rome"}}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "rain"},
        {"role": "user", "content": "Thanks."},
    ]
    text = generic_render(messages, [CHAT_WEATHER])
    assert (
        "<|im_start|>assistant\nChecking.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Rome"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n"
        "<tool_response>\nrain\n</tool_response><|im_end|>\n"
        "<|im_start|>user\nThanks.<|im_end|>\n") in text
    assert messages[1]["tool_calls"] and messages[2]["role"] == "tool"   # input unchanged


def test_an_image_in_a_tool_output_stays_in_place():
    """A tool output holding an image (a vision model's screenshot) keeps its parts in order
    inside the wrapper, so the image goes where the template puts it."""
    image = {"type": "image", "image_url": "data:image/png;base64,AA=="}
    [_, shown] = present([call_message("shot", {}),
                          {"role": "tool", "tool_call_id": "call_1",
                           "content": [{"type": "text", "text": "the screen:"}, image]}], None)
    assert shown == {"role": "user", "content": [
        {"type": "text", "text": "<tool_response>\n"}, {"type": "text", "text": "the screen:"},
        image, {"type": "text", "text": "\n</tool_response>"}]}


@pytest.mark.parametrize("seed", range(4))
def test_a_forced_call_re_renders_as_it_was_generated(seed):
    """The prompt cache keeps matching across turns: what a forced call wrote, parsed into
    a function_call and rendered back in the history, is the same text."""
    tools = [WEATHER, NESTED, EMPTY]
    grammar = family_for("generic").tool_call_grammar(tools, "required", parallel=True)
    written = sampler().sample(grammar, random.Random(seed))
    done = [e for e in parse("generic", written) if isinstance(e, ToolCallDone)]
    assert done
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": f"c{e.index}",
         "function": {"name": e.name, "arguments": json.loads(e.arguments)}} for e in done]}
    assert present([message], None)[0]["content"] == written


def test_a_string_argument_that_is_not_json_is_written_as_a_string():
    [shown] = present([call_message("f", "not json")], None)
    assert shown["content"] == '<tool_call>\n{"name": "f", "arguments": "not json"}\n</tool_call>'


class _Tokenizer:
    """Records what the chat template is given."""

    def __init__(self) -> None:
        self.tools: list[Any] = []

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: Any = None,
                            **kwargs: Any) -> str:
        self.tools.append(tools)
        return "".join(f"[{m['role']}]{m['content']}" for m in messages)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


@pytest.mark.parametrize("fmt", ["generic", "hermes"])
async def test_the_template_gets_no_tools_with_the_generic_format(fmt):
    """ModelHandle.render: with `generic` triode shows the tools itself and the template
    gets none; any other format's template gets them as before."""
    from triode.actors.model import ModelHandle

    send, receive = trio.open_memory_channel[Any](8)
    tokenizer = _Tokenizer()
    handle = ModelHandle(send, ModelInfo(path="m", context_length=4096, eos_token_ids=(0,),
                                         vocab_size=0, family=family_for(fmt)), tokenizer)
    rendered = await handle.render([{"role": "user", "content": "Hi"}], [CHAT_WEATHER])
    if fmt == "generic":
        assert tokenizer.tools == [None]
        assert rendered.text == f"[system]{tools_text([CHAT_WEATHER])}[user]Hi"
    else:
        assert tokenizer.tools == [[CHAT_WEATHER]] and rendered.text == "[user]Hi"
    send.close()
    async with receive:
        pass


# ---- parsing ----------------------------------------------------------------------------------

def parse(format_name: str, text: str) -> list[Any]:
    parser = make_parser(format_name, reasoning=False, starts_in_reasoning=False)
    return parser.feed(text) + parser.finish()


@pytest.mark.parametrize("text", ["", "Checking. "])
def test_blocks_parse_and_stream_whatever_the_chunking(text):
    """One call per block, after text or not: the calls, their arguments streamed as they
    were written, and no markup in the text, for every way the text is cut."""
    calls = [("get_weather", {"location": "Paris"}), ("write", TRICKY_ARGUMENTS)]
    outcome = parse_every_way("generic", render("hermes", text.strip(), calls))
    assert outcome.text == text.strip()
    assert outcome.call_values() == calls
    assert_streamed_final_arguments(outcome)


def test_a_list_of_calls_in_one_block_parses_and_streams():
    """SmolLM2's trained form, `<tool_call>[{...}, {...}]</tool_call>`, is read too."""
    calls = [{"name": "get_weather", "arguments": {"location": "Paris"}},
             {"name": "write", "arguments": TRICKY_ARGUMENTS}]
    text = f"Sure.\n<tool_call>[\n{json.dumps(calls[0])},\n{json.dumps(calls[1])}\n]</tool_call>"
    outcome = parse_every_way("generic", text)
    assert outcome.text == "Sure."
    assert outcome.call_values() == [(c["name"], c["arguments"]) for c in calls]
    assert_streamed_final_arguments(outcome)


def test_an_empty_list_is_markup_without_a_call():
    """`<tool_call>[]</tool_call>` is how SmolLM2 says no call is needed: nothing shows."""
    outcome = parse_every_way("generic", "<tool_call>[]</tool_call>\nParis is sunny.")
    assert (outcome.text, outcome.calls) == ("Paris is sunny.", ())


def test_a_cut_off_call_is_closed():
    """The token limit in the middle of the arguments: the call still comes, completed."""
    outcome = parse_every_way("generic", '<tool_call>\n{"name": "get_weather", '
                                         '"arguments": {"location": "Par')
    assert outcome.call_values() == [("get_weather", {"location": "Par"})]


def test_none_asked_for_leaves_the_envelope_as_text():
    """`--tool-format none`: no parser, the output is all text, as before."""
    text = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert parse_every_way("none", text).text == text


# ---- forcing ----------------------------------------------------------------------------------

_sampler: list[Sampler] = []


def sampler() -> Sampler:
    if not _sampler:
        _sampler.append(Sampler(CHATML))
    return _sampler[0]


def parsed(text: str) -> list[Any]:
    return parse("generic", text)


def test_required_calls_parse_back_and_validate():
    """tool_choice required, parallel: one or more envelope blocks to declared tools whose
    arguments validate, and nothing else; `<tool_call>` is spelled out in plain tokens."""
    tools = [WEATHER, NESTED, EMPTY]
    grammar = family_for("generic").tool_call_grammar(tools, "required", parallel=True)
    rng = random.Random("generic")
    for _ in range(8):
        text = sampler().sample(grammar, rng)
        assert text.startswith("<tool_call>\n{\"name\": ")
        check_calls(parsed(text), tools, names={t["name"] for t in tools}, count=None)


def test_named_call_is_exactly_one_call_to_it():
    tools = [WEATHER, NESTED, EMPTY]
    grammar = family_for("generic").tool_call_grammar(tools, "get_weather", parallel=False)
    rng = random.Random("generic named")
    for _ in range(6):
        check_calls(parsed(sampler().sample(grammar, rng)), tools, names={"get_weather"},
                    count=1)


def test_custom_tool_with_a_regex_format():
    grammar = family_for("generic").tool_call_grammar([CUSTOM], "dial", parallel=False)
    [call] = [e for e in parsed(sampler().sample(grammar, random.Random(3)))
              if isinstance(e, ToolCallDone)]
    arguments = json.loads(call.arguments)
    assert call.name == "dial" and set(arguments) == {"input"}
    jsonschema.validate(arguments["input"], {"type": "string", "pattern": "^[0-9]{3}$"})


def test_the_generic_grammar_is_hermes():
    """One envelope, one grammar: forced generic calls are Hermes's blocks."""
    assert family_for("generic").tool_call_grammar([WEATHER], "required") == \
        family_for("hermes").tool_call_grammar([WEATHER], "required")


def test_none_asked_for_still_cannot_be_forced():
    with pytest.raises(InvalidRequest) as caught:
        family_for("none").tool_call_grammar([WEATHER], "required")
    assert caught.value.param == "tool_choice"
