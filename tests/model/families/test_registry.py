import pytest

from triode.errors import SettingsError
from triode.model.families import (FAMILIES, HERMES, NONE, Family, canonical_format, detect,
                                   family_for, format_names, make_parser)
from triode.model.loading import LoadOptions, ModelInfo, check_options, model_family
from triode.model.parsers.whole import mlx_format_names


def test_every_name_it_lists_is_a_family_of_that_name():
    for name in format_names():
        family = family_for(name)
        assert isinstance(family, Family) and family.name == name == canonical_format(name)
    assert format_names()[-1] == "none"
    assert {f.name for f in FAMILIES} <= set(format_names())
    assert set(mlx_format_names()) - {"json_tools"} <= set(format_names())


def test_an_unknown_name_is_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown tool-call format 'bogus'; known: hermes, "):
        family_for("bogus")


def test_tool_format_picks_a_family_by_name_and_refuses_others_clearly():
    assert model_family(object(), LoadOptions(tool_format="json_tools")) is HERMES
    check_options(LoadOptions(tool_format="glm47"))
    with pytest.raises(SettingsError) as caught:
        check_options(LoadOptions(tool_format="bogus"))
    assert str(caught.value) == (f"--tool-format must be one of {', '.join(format_names())} "
                                 "(got 'bogus')")


class _Tokenizer:
    chat_template = "{{ '[TOOL_CALLS]' }}"
    init_kwargs: dict[str, str] = {}

    def get_vocab(self) -> dict[str, int]:
        return {}


def test_loading_detects_the_family_unless_told():
    assert model_family(_Tokenizer()) is family_for("mistral")
    assert detect(_Tokenizer.chat_template) is family_for("mistral")
    assert model_family(_Tokenizer(), LoadOptions(tool_format="none")) is NONE


def test_a_model_without_a_format_is_plain_and_make_parser_asks_the_family():
    info = ModelInfo(path="m", context_length=8, eos_token_ids=(0,), vocab_size=1)
    assert info.family is NONE
    parser = make_parser("none", reasoning=False, starts_in_reasoning=False)
    assert [e.text for e in parser.feed("hi") + parser.finish()] == ["hi"]
