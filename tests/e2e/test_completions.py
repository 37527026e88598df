"""`POST /v1/completions` (a plain prompt, no chat template) through a real server on the
bundled model, with the `openai` SDK's `completions`: the prompt is tokenized as it stands,
the text comes back as generated, streamed or not."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

MODEL = "triode-tiny"


def test_a_plain_prompt_is_continued_without_a_chat_template(client):
    """The prompt's tokens are the tokenizer's own (no template around them): usage counts
    exactly them, and greedy output is the same for the text and for its token ids."""
    prompt = "The sea is"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    choice = r.choices[0]
    assert choice.text and choice.finish_reason in ("stop", "length")
    chat = client.chat.completions.create(model=MODEL, max_tokens=1,
                                          messages=[{"role": "user", "content": prompt}])
    assert r.usage.prompt_tokens < chat.usage.prompt_tokens   # no template's tokens
    counted = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1)
    assert counted.usage.completion_tokens == 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_max_tokens_defaults_to_16_and_cuts_with_length(client):
    r = client.completions.create(model=MODEL, prompt="Once upon a time", temperature=0)
    assert r.usage.completion_tokens <= 16
    cut = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=2)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 2


def test_echo_and_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="The sea is", max_tokens=4, echo=True,
                                  logprobs=2, temperature=0)
    choice = r.choices[0]
    assert choice.text.startswith("The sea is")
    lp = choice.logprobs
    assert "".join(lp.tokens) == choice.text[len("The sea is"):]
    assert lp.text_offset[0] == len("The sea is") and len(lp.top_logprobs[0]) == 2


def test_stream_ends_with_done(server):
    raw = httpx.post(f"{server.base_url}/v1/completions", timeout=60, json={
        "model": MODEL, "prompt": "The sea is", "max_tokens": 6, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True}}).text
    frames = [line[len("data: "):] for line in raw.split("\n\n") if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    whole = httpx.post(f"{server.base_url}/v1/completions", timeout=60, json={
        "model": MODEL, "prompt": "The sea is", "max_tokens": 6, "temperature": 0}).json()
    assert text == whole["choices"][0]["text"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6


def test_the_sdk_streams(client):
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="The sea is", max_tokens=6, temperature=0, stream=True))
    assert text == client.completions.create(model=MODEL, prompt="The sea is", max_tokens=6,
                                             temperature=0).choices[0].text


@pytest.mark.parametrize("body,param", [
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, 10**9]}, "prompt"),
    ({"n": 2}, "n"),
    ({"best_of": 3}, "best_of"),
    ({"suffix": "end"}, "suffix"),
    ({"logprobs": 6}, "logprobs"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"prompt": [1, 2], "echo": True}, "echo"),
])
def test_bad_input_is_a_400_naming_the_field(server, body, param):
    r = httpx.post(f"{server.base_url}/v1/completions", timeout=60,
                   json={"model": MODEL, "prompt": "x", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_token_ids_are_a_prompt_too(client):
    ids = client.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=3)
    assert ids.usage.prompt_tokens == 3


def test_the_sdk_refuses_nothing_it_sends(client):
    """Every optional field the SDK's Completions API defines is accepted (or a 400
    naming it, above): user, seed, stop, penalties."""
    r = client.completions.create(model=MODEL, prompt="The sea is", max_tokens=4, user="u",
                                  seed=1, stop=["\n"], presence_penalty=0.1,
                                  frequency_penalty=0.1, top_p=0.9)
    assert r.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="x", logit_bias={"1": 3})
