from triode.model.families import detect_format, family_for, qwen3_coder

from .helpers import WEATHER, parsed

FAMILY = qwen3_coder.FAMILY


def test_registered_and_detected_by_function_blocks():
    assert family_for("qwen3_coder") is FAMILY
    assert detect_format("{{ '<tool_call>\\n<function=' ~ name ~ '>' }}") == "qwen3_coder"


def test_its_parser_reads_parameters_typed_by_the_tools():
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
            "</function>\n</tool_call>")
    assert parsed(FAMILY, text) == ("", [("get_weather", {"city": "Oslo"})])


def test_forced_calls_are_written_as_function_blocks():
    grammar = FAMILY.tool_call_grammar([WEATHER], "required", parallel=False)
    assert '"<function=get_weather>' in grammar.lark.replace("\\n", "")
    assert FAMILY.stop_markers == ()
