from triode.model.families import detect_format, family_for, hermes
from triode.model.templates import TemplateRoles

from .helpers import CHAT_WEATHER, WEATHER, parsed, template

FAMILY = hermes.FAMILY


def test_it_is_the_name_and_mlx_lms_json_tools():
    assert family_for("hermes") is FAMILY and family_for("json_tools") is FAMILY


def test_the_template_renders_the_tools_itself():
    text = FAMILY.render(template, *FAMILY.present([{"role": "user", "content": "hi"}],
                                                   [CHAT_WEATHER]), TemplateRoles(), {})
    assert text == f"user:hi|tools:{[CHAT_WEATHER]}"


def test_its_parser_reads_tool_call_blocks():
    text = 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert parsed(FAMILY, text) == ("Sure.", [("get_weather", {"city": "Oslo"})])


def test_no_stop_markers_and_think_blocks():
    assert FAMILY.stop_markers == () and FAMILY.think == ("<think>", "</think>")
    assert parsed(FAMILY, "<think>hm</think>ok", reasoning=True) == ("ok", [])


def test_forced_calls_are_tool_call_blocks():
    grammar = FAMILY.tool_call_grammar([WEATHER], "get_weather", parallel=False)
    assert dict(grammar.markers) == {"m_call_open": "<tool_call>",
                                     "m_call_close": "</tool_call>"}
    assert '"{\\"name\\": \\"get_weather\\", \\"arguments\\": "' in grammar.lark


def test_text_format_is_plain_json_then_after_reasoning():
    fmt = {"type": "json_object"}
    assert "think" not in FAMILY.text_format_grammar(fmt).lark
    after = FAMILY.text_format_grammar(fmt, in_reasoning=True, think_close="</reason>")
    assert ("m_think_close", "</reason>") in after.markers


def test_detected_by_its_blocks_but_not_qwen3_coders():
    assert detect_format("{{ '<tool_call>' }}") == "hermes"
    assert detect_format("{{ '<tool_call>\\n<function=' }}") != "hermes"
