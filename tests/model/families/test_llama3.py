from triode.model.families import detect_format, family_for, llama3

from .helpers import WEATHER, parsed

FAMILY = llama3.FAMILY


def test_registered_and_detected_by_its_headers():
    assert family_for("llama3") is FAMILY
    assert detect_format("{{ '<|start_header_id|>' + role }}") == "llama3"
    assert detect_format("{{ '<|python_tag|>' }}") == "llama3"


def test_its_parser_reads_a_json_call():
    text = '{"name": "get_weather", "parameters": {"city": "Oslo"}}'
    assert parsed(FAMILY, text) == ("", [("get_weather", {"city": "Oslo"})])


def test_forced_calls_are_its_json_objects():
    grammar = FAMILY.tool_call_grammar([WEATHER], "get_weather", parallel=False)
    assert '\\"parameters\\": ' in grammar.lark and grammar.markers == ()
    assert FAMILY.stop_markers == ()
