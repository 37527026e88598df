from triode.model import harmony as harmony_format
from triode.model.families import detect_format, family_for, harmony
from triode.model.parsers.harmony import HarmonyParser
from triode.model.templates import TemplateRoles

from .helpers import CHAT_WEATHER, WEATHER

FAMILY = harmony.FAMILY


def test_detected_before_mlx_lm_is_asked():
    assert family_for("harmony") is FAMILY and FAMILY.before_mlx
    template = "{{ '<|channel|>' }}{{ '<|message|>' }}"
    assert detect_format(template, configured="hermes") == "harmony"


def test_rendered_by_triode_not_by_the_chat_template():
    def refuse(messages, tools):
        raise AssertionError("the chat template is not used")

    messages = [{"role": "user", "content": "hi"}]
    assert FAMILY.render(refuse, messages, [CHAT_WEATHER], TemplateRoles(),
                         {"reasoning_effort": "low"}) == \
        harmony_format.render(messages, [CHAT_WEATHER], reasoning_effort="low")


def test_its_turn_ends_on_call_and_return():
    assert FAMILY.stop_markers == ("<|return|>", "<|call|>")


def test_its_parser_reads_channels_not_think_blocks():
    parser = FAMILY.parser(reasoning=True, starts_in_reasoning=True)
    assert isinstance(parser, HarmonyParser)


def test_its_grammars_are_harmonys_whatever_the_prompt_opened():
    calls = FAMILY.tool_call_grammar([WEATHER], "get_weather", max_output_tokens=100)
    assert "m_h_call" in calls.lark and "analysis_text[max_tokens=50]" in calls.lark
    assert FAMILY.tool_call_grammar([WEATHER], "get_weather", in_reasoning=True,
                                    max_output_tokens=100) == calls
    text = FAMILY.text_format_grammar({"type": "json_object"})
    assert text is not None and "m_h_return" in text.lark
    assert FAMILY.text_format_grammar({"type": "text"}) is None
