"""A real model on every path: SmolLM2-135M-Instruct (the README's model, a Q4_1 GGUF from the
package registry) through a real server and the openai SDK. Prompts are short and generations
small: this CPU decodes it at tens of tokens a second. Speed lives in bench/peers.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from triode.model import gguf
from triode.responses.compaction import decode

from ..conftest import run_server
from .smollm2 import NAME, ensure_smollm2

GREEDY = {"temperature": 0.0}
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
CITY = {"type": "object", "additionalProperties": False, "required": ["city", "country"],
        "properties": {"city": {"type": "string", "maxLength": 24},
                       "country": {"type": "string", "maxLength": 24}}}


@pytest.fixture(scope="module")
def smol():
    ensure_smollm2()
    with run_server("--model", NAME) as s:
        yield s


@pytest.fixture(scope="module")
def tokenizer():
    return gguf.build_tokenizer(gguf.read(Path(ensure_smollm2())))


def test_a_fixed_greedy_question_names_paris(smol):
    """The README's first question gets a real answer: greedy, it names Paris."""
    resp = smol.client().responses.create(model=NAME, input="What is the capital of France?",
                                          max_output_tokens=24, **GREEDY)
    assert resp.status == "completed"
    assert "Paris" in resp.output_text
    assert smol.health()["weights"].startswith("float32 (stored as 4/8-bit)")


def test_sampling_defaults_are_the_model_cards(smol):
    """A request that leaves sampling out gets SmolLM2's model card's: temperature 0.2,
    top_p 0.9 (the file states none)."""
    resp = smol.client().responses.create(model=NAME, input="Hi", max_output_tokens=2)
    assert (resp.temperature, resp.top_p) == (0.2, 0.9)


def test_the_stream_carries_the_same_text_as_the_response(smol):
    """Streamed deltas join to exactly the text the same greedy request returns whole."""
    client = smol.client()
    body = {"model": NAME, "input": "What is the capital of Italy?", "max_output_tokens": 32,
            **GREEDY}
    whole = client.responses.create(**body).output_text
    deltas, final = [], None
    with client.responses.stream(**body) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert whole and "".join(deltas) == whole == final.output_text


def test_the_end_of_turn_token_never_reaches_the_text(smol):
    """Generation ends on the model's end-of-turn token, which is never text."""
    client = smol.client()
    for question in ("Say hi.", "What is 2 + 2?", "Write one word."):
        resp = client.responses.create(model=NAME, input=question, max_output_tokens=48,
                                       **GREEDY)
        assert resp.status == "completed", question   # ended by the stop, not the limit
        assert not any(marker in resp.output_text for marker in END_OF_TURN), resp.output_text


def test_input_tokens_count_the_rendered_template(smol, tokenizer):
    """usage.input_tokens is the tokenizer's count of the chat template's rendering."""
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello there, 1234 times 😀!"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = len(tokenizer.encode(text, add_special_tokens=False))
    client = smol.client()
    resp = client.responses.create(model=NAME, instructions="Be brief.",
                                   input="Hello there, 1234 times 😀!", max_output_tokens=4)
    assert resp.usage.input_tokens == expected
    counted = client.responses.input_tokens.count(model=NAME, instructions="Be brief.",
                                                  input="Hello there, 1234 times 😀!")
    assert counted.input_tokens == expected


def test_strict_json_schema_output_is_valid_on_the_real_vocabulary(smol):
    """Constrained decoding over the 49k-token vocabulary: the text parses and validates."""
    resp = smol.client().responses.create(
        model=NAME, input="Give the capital of France and its country as JSON.",
        max_output_tokens=64, **GREEDY,
        text={"format": {"type": "json_schema", "name": "capital", "schema": CITY,
                         "strict": True}})
    assert resp.status == "completed"
    value = json.loads(resp.output_text)
    assert set(value) == {"city", "country"}
    assert all(isinstance(v, str) and len(v) <= 24 for v in value.values())


def summary_of(item: dict) -> str:
    """The summary a compaction item carries (its encrypted_content is base64url JSON)."""
    return decode(item["encrypted_content"], "item")[0]


def chain(client, turns: int) -> list:
    """A `previous_response_id` chain of `turns` short greedy turns."""
    responses, previous = [], None
    for i in range(turns):
        resp = client.responses.create(
            model=NAME, input=f"Turn {i + 1}: name a fruit, one word.", max_output_tokens=8,
            previous_response_id=previous, **GREEDY)
        responses.append(resp)
        previous = resp.id
    return responses


@pytest.fixture(scope="module")
def ten_turns(smol) -> list:
    return chain(smol.client(), 10)


def test_a_ten_turn_chain_reuses_the_prompt_cache(ten_turns):
    """Each turn's cached_tokens covers at least 95% of the tokens of the turns before it."""
    responses = ten_turns
    for before, turn in zip(responses, responses[1:]):
        earlier = before.usage.input_tokens + before.usage.output_tokens
        cached = turn.usage.input_tokens_details.cached_tokens
        assert cached >= 0.95 * earlier, (turn.usage, before.usage)


def test_a_ten_turn_chain_compacts_and_continues(smol, ten_turns):
    """/compact on a 10-turn chain gives kept items and a real summary; the next turn sent
    with them instead of the chain answers on a shorter prompt."""
    client = smol.client()
    last = ten_turns[-1]
    compacted = smol.http.post("/v1/responses/compact", json={
        "model": NAME, "previous_response_id": last.id, "keep_tokens": 64,
        "max_output_tokens": 48})
    assert compacted.status_code == 200, compacted.text
    items = compacted.json()["output"]
    summaries = [summary_of(item) for item in items if item["type"] == "compaction"]
    assert len(summaries) == 1 and summaries[0].strip()
    resp = client.responses.create(
        model=NAME, input=[*items, {"role": "user", "content": "One more fruit, one word."}],
        max_output_tokens=8, **GREEDY)
    assert resp.output_text.strip()
    assert resp.status == "completed" or resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.input_tokens < last.usage.input_tokens


def test_a_thousand_token_prompt(smol, tokenizer):
    """A prompt of over 1,000 tokens is prefilled and answered."""
    facts = " ".join(f"Fact {i}: the box number {i} holds {i * 7 % 13} red marbles."
                     for i in range(70))
    resp = smol.client().responses.create(
        model=NAME, input=f"{facts}\nHow many boxes are listed? Answer briefly.",
        max_output_tokens=16, **GREEDY)
    assert resp.usage.input_tokens >= 1000
    assert resp.status in ("completed", "incomplete") and resp.output_text.strip()


def test_the_websocket_mode(smol):
    """client.responses.connect(): a response over the WebSocket answers as over HTTP."""
    client = smol.client()
    body = {"model": NAME, "input": "What is the capital of France?", "max_output_tokens": 24,
            **GREEDY}
    expected = client.responses.create(**body).output_text
    events = []
    with client.responses.connect() as conn:
        conn.response.create(**body)
        for event in conn:
            events.append(event)
            if event.type in ("response.completed", "response.incomplete", "error"):
                break
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == expected and "Paris" in expected
