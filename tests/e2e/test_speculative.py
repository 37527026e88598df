"""Speculative decoding end to end: the default server (`--speculative ngram`) answers exactly
as one with `--speculative off` does, text, logprobs and seeded samples alike, and it did
speculate to get there."""

from __future__ import annotations

import pytest

from ..conftest import run_server

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
