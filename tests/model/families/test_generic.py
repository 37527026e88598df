from triode.model.families import HERMES, detect_format, family_for, generic
from triode.model.generic_tools import tools_text
from triode.model.templates import TemplateRoles

from .helpers import CHAT_WEATHER, WEATHER, parsed, template

FAMILY = generic.FAMILY


def test_a_template_no_family_claims_gets_it():
    assert family_for("generic") is FAMILY
    assert detect_format("{{ messages }}") == "generic"


def test_the_tools_are_written_into_the_messages_and_the_template_gets_none():
    messages, tools = FAMILY.present([{"role": "user", "content": "hi"}], [CHAT_WEATHER])
    assert tools is None
    text = FAMILY.render(template, messages, tools, TemplateRoles(), {})
    assert text == f"system:{tools_text([CHAT_WEATHER])}|user:hi|tools:None"


def test_its_parser_reads_hermes_blocks():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert parsed(FAMILY, text) == ("", [("get_weather", {"city": "Oslo"})])


def test_forced_calls_are_hermes_blocks_borrowed():
    assert not FAMILY.own_syntax and FAMILY.forced is HERMES.forced
    assert FAMILY.tool_call_grammar([WEATHER], "required") == \
        HERMES.tool_call_grammar([WEATHER], "required")
    assert FAMILY.stop_markers == ()
