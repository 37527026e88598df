import pytest

from triode.model.families import WholeCalls, family_for, format_names
from triode.model.families.whole import FORCED
from triode.model.parsers.whole import WholeCallParser, mlx_format_names

from .helpers import WEATHER, parsed


def test_every_other_mlx_lm_format_is_one():
    whole = [n for n in format_names() if isinstance(family_for(n), WholeCalls)]
    assert "glm47" in whole and "pythonic" in whole
    assert set(whole) <= set(mlx_format_names())
    assert family_for("glm47") is family_for("glm47")


@pytest.mark.parametrize("name", sorted(FORCED))
def test_the_forced_ones_write_their_own_syntax(name):
    if name not in mlx_format_names():
        pytest.skip("not in the installed mlx-lm")
    family = family_for(name)
    assert family.forced is FORCED[name]
    family.tool_call_grammar([WEATHER], "get_weather", parallel=False)


def test_mlx_lms_parser_reads_the_calls_whole():
    family = family_for("glm47")
    assert isinstance(family.tool_parser(None), WholeCallParser)
    text = "Hi<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
    assert parsed(family, text) == ("Hi", [("get_weather", {"city": "Oslo"})])
    assert family.stop_markers == ()
