from triode.model.families import WholeCalls, family_for, kimi_k2
from triode.model.templates import TemplateRoles

from .helpers import WEATHER

FAMILY = kimi_k2.FAMILY
TURNS = [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
             {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
         {"role": "tool", "tool_call_id": "call_b", "content": "2"}]


def test_one_of_mlx_lms_formats_with_a_module_of_its_own():
    assert family_for("kimi_k2") is FAMILY and isinstance(FAMILY, WholeCalls)


def test_the_template_gets_the_call_ids_the_model_writes():
    seen = []

    def apply(messages, tools):
        seen.append(messages)
        return ""

    FAMILY.render(apply, TURNS, None, TemplateRoles(), {})
    [messages] = seen
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["functions.f:0", "functions.g:1"]
    assert messages[2]["tool_call_id"] == "functions.g:1"
    assert TURNS[1]["tool_calls"][0]["id"] == "call_a"   # the input is left alone


def test_forced_calls_in_its_sections():
    grammar = FAMILY.tool_call_grammar([WEATHER], "required")
    assert ("m_section_begin", "<|tool_calls_section_begin|>") in grammar.markers
    assert FAMILY.stop_markers == ()
