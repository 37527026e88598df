"""Speculative decoding end to end: the default server (`--speculative ngram`) answers exactly
as one with `--speculative off` does, text, logprobs and seeded samples alike, and it did
speculate to get there."""

from __future__ import annotations

import pytest

from ..conftest import run_server, wait_until

MODEL = "triode-tiny"
PROMPTS = ["Reply with: lantern meadow harbor pepper falcon maple canyon",
           "Reply with: quartz dune kelp glacier orbit tulip marble cedar comet willow",
           "Think, then reply with: ember velvet"]


@pytest.fixture(scope="module")
def plain():
    with run_server("--speculative", "off") as s:
        yield s


def answer(client, prompt: str, **extra):
    r = client.responses.create(model=MODEL, input=prompt, max_output_tokens=80,
                                include=["message.output_text.logprobs"], top_logprobs=2,
                                **extra)
    logprobs = r.output[-1].content[0].logprobs
    tokens = [(lp.token, [t.token for t in lp.top_logprobs]) for lp in logprobs]
    return r.output_text, tokens, [lp.logprob for lp in logprobs]


def assert_same(a, b):
    assert a[:2] == b[:2]
    assert a[2] == pytest.approx(b[2], abs=1e-3)


def generated(server) -> tuple[int, int]:
    """The engine's steps with output and the tokens they emitted, so far (`/health`)."""
    generation = server.health()["generation"]
    return generation["steps"], generation["tokens"]


def test_the_same_answers_with_and_without_speculation(server, plain):
    """Identical answers, and the speculating server emitted more tokens than it took steps:
    one request at a time, a plain step emits one token, so only accepted drafts make up
    the difference."""
    fast, slow = server.client(), plain.client()
    steps, tokens = generated(server)
    for prompt in PROMPTS:
        assert_same(answer(fast, prompt), answer(slow, prompt))
    seeded = dict(temperature=0.9, extra_body={"seed": 5, "top_k": 20})
    assert_same(answer(fast, PROMPTS[1], **seeded), answer(slow, PROMPTS[1], **seeded))
    steps_after, tokens_after = generated(server)
    assert tokens_after - tokens > steps_after - steps, "no draft token was accepted"


LONG_COPY = ("Reply with: lantern meadow harbor pepper falcon maple canyon velvet ember glacier "
             "orbit tulip marble cedar comet willow saffron thunder pebble quartz lemon anchor "
             "breeze cobalt dune fern garnet hazel ivory juniper kelp lotus mango nectar apple "
             "river stone cloud violet copper")


@pytest.fixture(scope="module")
def logged():
    """A default (speculating) server whose access log is on."""
    with run_server("--log-level", "info") as s:
        yield s


def speculation(server) -> dict:
    return server.health()["speculation"]


def test_health_and_metrics_report_what_speculation_did(logged, plain):
    """Drafted and accepted tokens grow with a copy prompt, accepted never exceeds drafted,
    the rate is their quotient, a sequence gets more than one token per step, the guard
    reports width 1 as drafting; /metrics says the same. A server with `--speculative off`
    reports no speculation at all."""
    from .test_metrics import scrape, value

    before = speculation(logged)
    logged.client().responses.create(model=MODEL, input=LONG_COPY, max_output_tokens=80)
    after = wait_until(lambda: (s := speculation(logged))["steps"] > before["steps"] and s)
    assert after["drafted_tokens"] > before["drafted_tokens"]
    assert after["accepted_tokens"] > before["accepted_tokens"]
    assert 0 < after["accepted_tokens"] <= after["drafted_tokens"]
    assert after["acceptance_rate"] == pytest.approx(
        after["accepted_tokens"] / after["drafted_tokens"], abs=1e-4)
    assert after["speculative_steps"] > 0 and after["tokens_per_step"] > 1
    guard = {g["width"]: g for g in after["guard"]}
    assert guard[1]["state"] == "on"

    families = scrape(logged)
    assert value(families, "triode_speculative_drafted_tokens_total") == after["drafted_tokens"]
    assert value(families, "triode_speculative_accepted_tokens_total") == (
        after["accepted_tokens"])
    assert value(families, "triode_decode_steps_total", kind="speculative") == (
        after["speculative_steps"])
    assert value(families, "triode_decode_steps_total", kind="plain") + value(
        families, "triode_decode_steps_total", kind="speculative") == after["steps"]
    assert value(families, "triode_speculative_tokens_per_step") == pytest.approx(
        after["tokens_per_step"], abs=1e-3)
    assert value(families, "triode_speculative_guard_state", width="1", state="on") == 1

    assert plain.health()["speculation"] is None
    assert not [name for name in scrape(plain) if "speculative" in name]


def test_the_access_line_carries_the_accepted_drafts(logged):
    """A create's access line says how many of its output tokens were accepted drafts,
    streamed or not; one request at a time, the lines add up to what /health counted."""
    from .test_access_log import access_lines, fields

    client = logged.client()
    posts = lambda: [m for m in access_lines(logged.log) if m["method"] == "POST"]  # noqa: E731
    lines_before = len(posts())
    accepted_before = speculation(logged)["accepted_tokens"]
    created = client.responses.create(model=MODEL, input=LONG_COPY, max_output_tokens=80)
    with client.responses.stream(model=MODEL, input=LONG_COPY, max_output_tokens=300) as stream:
        streamed = stream.get_final_response()
    lines = wait_until(lambda: p if len(p := posts()[lines_before:]) == 2 else None)
    drafts = {fields(m)["response"]: int(fields(m)["accepted_drafts"]) for m in lines}
    assert set(drafts) == {created.id, streamed.id}
    assert 0 < drafts[created.id] < created.usage.output_tokens
    assert 0 < drafts[streamed.id] < streamed.usage.output_tokens
    # The engine reports its figures with the step that finishes a sequence, before the
    # response can end.
    assert speculation(logged)["accepted_tokens"] - accepted_before == sum(drafts.values())
