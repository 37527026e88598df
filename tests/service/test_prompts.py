"""Stored prompt templates (`--prompts-dir`): lookup by id and version, `{{variable}}`
substitution, and the errors that name what is wrong."""

from __future__ import annotations

import pytest

from triode.errors import InvalidRequest, NotFound, NotSupportedYet
from triode.responses.convert import structure
from triode.responses.wire import CreateResponse, InputTokensRequest
from triode.service.prompts import PromptTemplates, render


@pytest.fixture
def prompts(tmp_path):
    greet = tmp_path / "pmpt_greet"
    greet.mkdir()
    (greet / "1.txt").write_text("Say {{word}}.")
    (greet / "2.txt").write_text("Say {{ word }} to {{who}}.")
    (greet / "10.txt").write_text("Version ten: {{word}}.")
    (greet / "draft.txt").write_text("A draft.")
    (tmp_path / "pmpt_named").mkdir()
    (tmp_path / "pmpt_named" / "draft.txt").write_text("Only a draft.")
    return PromptTemplates(tmp_path)


def request(prompt, cls=CreateResponse, **fields):
    return structure({"model": "m", "prompt": prompt, **fields}, cls)


async def test_the_template_becomes_the_instructions(prompts):
    """The rendered template is the instructions, before the request's own."""
    req = await prompts.apply(request({"id": "pmpt_greet", "version": "2", "variables": {
        "word": "hello", "who": {"type": "input_text", "text": "the world"}}}))
    assert req.instructions == "Say hello to the world."
    req = await prompts.apply(request({"id": "pmpt_greet", "version": "1",
                                       "variables": {"word": "hi"}}, instructions="Be brief."))
    assert req.instructions == "Say hi.\n\nBe brief."
    assert req.prompt is not None and req.prompt.id == "pmpt_greet"   # kept for the echo


async def test_without_a_version_the_highest_numbered_one_is_used(prompts):
    req = await prompts.apply(request({"id": "pmpt_greet", "variables": {"word": "x"}}))
    assert req.instructions == "Version ten: x."
    req = await prompts.apply(request({"id": "pmpt_greet", "version": "draft"}))
    assert req.instructions == "A draft."


async def test_input_tokens_requests_keep_their_class(prompts):
    req = await prompts.apply(request({"id": "pmpt_greet", "version": "draft"},
                                      InputTokensRequest, personality="friendly"))
    assert isinstance(req, InputTokensRequest) and req.instructions == "A draft."


@pytest.mark.parametrize("prompt,param", [
    ({"id": "pmpt_nope"}, "prompt.id"),
    ({"id": "../pmpt_greet"}, "prompt.id"),
    ({"id": "pmpt_greet/1"}, "prompt.id"),
    ({"id": ".hidden"}, "prompt.id"),
    ({"id": "pmpt_greet", "version": "3"}, "prompt.version"),
    ({"id": "pmpt_greet", "version": "../../etc/passwd"}, "prompt.version"),
    ({"id": "pmpt_named"}, "prompt.id"),      # no numbered version to default to
])
async def test_what_is_not_there_is_a_404_naming_it(prompts, prompt, param):
    with pytest.raises(NotFound) as exc:
        await prompts.apply(request(prompt))
    assert exc.value.param == param and exc.value.code == "not_found"


@pytest.mark.parametrize("variables,param", [
    ({}, "prompt.variables.word"),
    ({"wrd": "x"}, "prompt.variables.word"),
    ({"word": {"type": "input_image", "image_url": "data:,"}}, "prompt.variables.word"),
])
async def test_a_missing_or_non_text_variable_is_a_400_naming_it(prompts, variables, param):
    with pytest.raises(InvalidRequest) as exc:
        await prompts.apply(request({"id": "pmpt_greet", "version": "1",
                                     "variables": variables}))
    assert exc.value.param == param


async def test_without_a_directory_a_prompt_is_a_400_naming_it():
    off = PromptTemplates(None)
    with pytest.raises(NotSupportedYet) as exc:
        await off.apply(request({"id": "pmpt_greet"}))
    assert exc.value.param == "prompt" and "--prompts-dir" in exc.value.message
    plain = structure({"model": "m"}, CreateResponse)
    assert await off.apply(plain) is plain


def test_render_replaces_each_named_variable_and_ignores_the_rest():
    assert render("{{a}}{{ a }}-{{b}} {c} {{ }}", {"a": "1", "b": "2", "z": "9"}) \
        == "11-2 {c} {{ }}"
