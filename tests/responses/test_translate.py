"""A create request made into a plan: its own checks (each a 400 naming the field), the
sampling it asks for over the server's defaults, the history it renders with, and what the
template is given. Nothing here depends on the model's tool-call format."""

from __future__ import annotations

import pytest

from triode.errors import InvalidRequest
from triode.model.request import Sampling
from triode.responses import translate, wire
from triode.responses.convert import structure
from triode.responses.items import input_items

DEFAULTS = Sampling(temperature=0.7, top_p=0.8, top_k=20, min_p=0.05)


def req(**fields) -> wire.CreateResponse:
    return structure({"model": "m", "input": "hi", **fields}, wire.CreateResponse)


def test_the_request_s_sampling_wins_over_the_server_s_defaults():
    """Each sampling field the request sets is used (and echoed); the others are the
    server's defaults; presence and frequency penalties default to 0."""
    plan = translate.plan(req(temperature=0.0, top_k=5), DEFAULTS)
    s = plan.sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p) == (0.0, 0.8, 5, 0.05)
    assert (s.presence_penalty, s.frequency_penalty) == (0.0, 0.0)
    assert (plan.echo.temperature, plan.echo.top_p) == (0.0, 0.8)


def test_the_history_renders_before_this_turn_s_input_after_the_instructions():
    """Messages: the instructions (never inherited from the history), the earlier turns,
    then this input; `past` keeps the earlier turns as given."""
    earlier = input_items(req(input=[{"role": "user", "content": "before"},
                                     {"role": "assistant", "content": "reply"}]))
    plan = translate.plan(req(input="now", instructions="be brief"), DEFAULTS, earlier)
    assert [(m["role"], m["content"]) for m in plan.messages] == [
        ("system", "be brief"), ("user", "before"), ("assistant", "reply"), ("user", "now")]
    assert plan.past == earlier
    assert len(plan.items) == 1


def test_a_tool_output_must_answer_a_call_of_the_history():
    """An output whose call_id no call in the rendered history has is a 400 naming it; one
    answering a call of an earlier turn passes."""
    output = {"type": "function_call_output", "call_id": "call_1", "output": "42"}
    with pytest.raises(InvalidRequest) as refused:
        translate.plan(req(input=[{"role": "user", "content": "x"}, output]), DEFAULTS)
    assert refused.value.param == "input[1].call_id"
    earlier = input_items(req(input=[{"type": "function_call", "call_id": "call_1",
                                      "name": "f", "arguments": "{}"}]))
    plan = translate.plan(req(input=[output]), DEFAULTS, earlier)
    assert plan.messages[-1]["role"] == "tool"


@pytest.mark.parametrize("fields, param", [
    ({"stream": True, "background": True}, "stream"),
    ({"previous_response_id": "resp_1", "conversation": "conv_1"}, "previous_response_id"),
    ({"include": ["message.output_text.logprobs", "everything"]}, "include[1]"),
    ({"stop": ["end", ""]}, "stop[1]"),
    ({"stop": [str(i) for i in range(17)]}, "stop"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"background_options": {"completion_window": "2h"}},
     "background_options.completion_window"),
    ({"context_management": [{"type": "compaction", "compact_threshold": 0}]},
     "context_management[0].compact_threshold"),
    ({"metadata": {"k" * 65: "v"}}, "metadata." + "k" * 65),
    ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
])
def test_a_request_s_own_checks_are_400s_naming_the_field(fields, param):
    """What needs nothing but the request is checked before anything is read or started."""
    with pytest.raises(InvalidRequest) as refused:
        translate.validate(req(**fields))
    assert refused.value.param == param


def test_the_template_gets_the_reasoning_effort_unless_its_kwargs_set_one():
    """`reasoning.effort` reaches the template as `reasoning_effort`; a
    `chat_template_kwargs` value of its own wins."""
    assert translate.template_kwargs(req(reasoning={"effort": "low"})) == {
        "reasoning_effort": "low"}
    assert translate.template_kwargs(req(
        reasoning={"effort": "low"},
        chat_template_kwargs={"reasoning_effort": "high", "enable_thinking": False})) == {
        "reasoning_effort": "high", "enable_thinking": False}


def test_logprobs_are_generated_only_when_included():
    """`top_logprobs` alone is echoed; the plan asks for logprobs only with the include."""
    assert translate.plan(req(top_logprobs=3), DEFAULTS).top_logprobs is None
    included = translate.plan(req(top_logprobs=3, include=["message.output_text.logprobs"]),
                              DEFAULTS)
    assert (included.top_logprobs, included.echo.top_logprobs) == (3, 3)
