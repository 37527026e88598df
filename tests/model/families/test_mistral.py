from triode.model.families import detect_format, family_for, mistral

from .helpers import WEATHER, parsed

FAMILY = mistral.FAMILY


def test_registered_and_detected_by_its_marker():
    assert family_for("mistral") is FAMILY
    assert detect_format("{{ '[TOOL_CALLS]' }}") == "mistral"


def test_its_parser_reads_both_call_syntaxes():
    call = ("get_weather", {"city": "Oslo"})
    assert parsed(FAMILY, 'Hi[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}') == ("Hi", [call])
    assert parsed(FAMILY, '[TOOL_CALLS][{"name": "get_weather", "arguments": '
                          '{"city": "Oslo"}}]') == ("", [call])


def test_forced_calls_use_its_markers():
    grammar = FAMILY.tool_call_grammar([WEATHER], "get_weather", parallel=False)
    assert dict(grammar.markers) == {"m_calls": "[TOOL_CALLS]", "m_args": "[ARGS]"}
    assert FAMILY.stop_markers == ()
