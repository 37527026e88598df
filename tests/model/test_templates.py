"""Template hygiene: the roles each family's template refuses are found by probing it, and
messages fitted to it render; past reasoning and tool calls render in the model's format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from triode.model.families import family_for, make_parser
from triode.model.parsers import ToolCallDone
from triode.model.templates import TemplateRoles, fit_roles, probe_roles, render_fitted

from ..fixtures.families import FAMILIES, Family, tokenizer_json

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}}}}}]


def renderer(family: Family, **kwargs: Any):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(tokenizer_json(family))))
    tokenizer.chat_template = family.template

    def render(messages: list[dict[str, Any]]) -> str:
        text: str = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  tokenize=False, **kwargs)
        return text
    return render


REFUSES = {   # what each fixture's template refuses, as its real counterpart does
    "gemma4": TemplateRoles(developer=False, late_system=False),
    "function_gemma": TemplateRoles(late_system=False),
    "ministral3": TemplateRoles(developer=False, late_system=False),
    "glm": TemplateRoles(developer=False),
    "laguna": TemplateRoles(developer=False),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_probe_finds_the_roles_a_template_refuses(family):
    assert probe_roles(renderer(FAMILIES[family])) == REFUSES.get(family, TemplateRoles())


AGENT_TURNS = [
    {"role": "developer", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug."},
    {"role": "assistant", "content": "Looking."},
    {"role": "system", "content": "The sandbox is read-only now."},
    {"role": "developer", "content": "Approvals: never."},
    {"role": "user", "content": "Go on."},
]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_developer_and_late_system_messages_render_on_every_template(family):
    """The agent's developer and mid-conversation system messages render, every text kept,
    even where the probe's answer alone is not enough (a developer message after the start
    on a template that takes one only first)."""
    render = renderer(FAMILIES[family])
    text = render_fitted(render, AGENT_TURNS, probe_roles(render))
    for message in AGENT_TURNS:
        assert message["content"] in text


def test_fit_merges_as_documented():
    """developer → system; late system text joins the leading system message, in order."""
    fitted = fit_roles(AGENT_TURNS, TemplateRoles(developer=False, late_system=False))
    assert fitted == [
        {"role": "system", "content": "You are a coding agent.\n\nThe sandbox is read-only "
                                      "now.\n\nApprovals: never."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "Looking."},
        {"role": "user", "content": "Go on."},
    ]
    assert AGENT_TURNS[0]["role"] == "developer"   # the input is not changed


def test_fit_without_any_system_role_opens_the_first_user_message():
    fitted = fit_roles([{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hi."}],
                       TemplateRoles(system=False))
    assert fitted == [{"role": "user", "content": "Be brief.\n\nHi."}]


def test_nothing_refused_changes_nothing():
    assert fit_roles(AGENT_TURNS, TemplateRoles()) == AGENT_TURNS


def test_a_template_that_refuses_everything_teaches_nothing():
    def render(messages: list[dict[str, Any]]) -> str:
        raise ValueError("broken template")
    assert probe_roles(render) == TemplateRoles()


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - {"llama3"}))
def test_past_reasoning_and_calls_render_as_the_model_writes_them(family):
    """An earlier turn's reasoning reaches the template, and its call renders in the model's
    own format: the format's parser reads it back from the prompt (Llama 3's calls have no
    marker to find mid-prompt; its round trip is tested end to end)."""
    f = FAMILIES[family]
    call = {"type": "function", "id": "call_1",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "reasoning_content": "Paris, I think.",
                 "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                 "content": "sunny"}]
    text = renderer(f)(family_for(f.tool_format).fit_messages(messages))
    if "reasoning_content" in f.template:   # the families that reason
        assert "Paris, I think." in text
    parser = make_parser(f.tool_format, reasoning=False, starts_in_reasoning=False, tools=TOOLS)
    events = parser.feed(text) + parser.finish()
    calls = [(e.name, json.loads(e.arguments)) for e in events if isinstance(e, ToolCallDone)]
    assert ("get_weather", {"city": "Paris"}) in calls


def test_kimi_call_ids_are_the_models_own():
    """Kimi K2 numbers its calls across the conversation; outputs follow their calls."""
    def turn(*ids: str) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "id": i, "function": {"name": "f", "arguments": {}}}
            for i in ids]}
    messages = [turn("call_a", "call_b"), {"role": "tool", "tool_call_id": "call_b"},
                turn("call_c"), {"role": "tool", "tool_call_id": "call_c"}]
    fitted = family_for("kimi_k2").fit_messages(messages)
    assert [c["id"] for m in fitted if m["role"] == "assistant" for c in m["tool_calls"]] == [
        "functions.f:0", "functions.f:1", "functions.f:2"]
    assert [m["tool_call_id"] for m in fitted if m["role"] == "tool"] == [
        "functions.f:1", "functions.f:2"]
    assert family_for("glm47").fit_messages(messages) == messages
