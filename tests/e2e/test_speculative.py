"""Speculative decoding end to end: the default server (`--speculative ngram`) answers exactly
as one with `--speculative off` does, text, logprobs and seeded samples alike."""

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


def test_the_same_answers_with_and_without_speculation(server, plain):
    fast, slow = server.client(), plain.client()
    for prompt in PROMPTS:
        assert_same(answer(fast, prompt), answer(slow, prompt))
    seeded = dict(temperature=0.9, extra_body={"seed": 5, "top_k": 20})
    assert_same(answer(fast, PROMPTS[1], **seeded), answer(slow, PROMPTS[1], **seeded))
