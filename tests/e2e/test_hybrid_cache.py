"""The prompt cache across the turns of a chain on a hybrid model (tests/fixtures/hybrid.py:
qwen3_5, recurrent state that cannot be trimmed), through real servers: later turns are
served from the cache, `cached_tokens` says how much, and greedy output is the same as on a
server without a prompt cache."""

from __future__ import annotations

import pytest

from ..conftest import run_server
from ..fixtures import hybrid

INSTRUCTIONS = "You are a careful assistant. " + "apple river stone cloud violet copper " * 30
ASKS = ["Reply with: quartz meadow", "Reply with: cobalt dune", "Reply with: ember lotus"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return hybrid.build(tmp_path_factory.mktemp("models") / "hybrid-tiny")


@pytest.fixture(scope="module")
def cached_server(model_dir):
    with run_server("--model", str(model_dir)) as s:
        yield s


@pytest.fixture(scope="module")
def cold_server(model_dir):
    with run_server("--model", str(model_dir), "--prompt-cache-bytes", "0") as s:
        yield s


def chain(server, asks: list[str], **extra) -> list:
    client = server.client()
    responses, previous = [], None
    for ask in asks:
        more = {"previous_response_id": previous} if previous else {}
        r = client.responses.create(model="hybrid-tiny", instructions=INSTRUCTIONS, input=ask,
                                    max_output_tokens=12, temperature=0, **more, **extra)
        responses.append(r)
        previous = r.id
    return responses


def cached(response) -> int:
    return response.usage.input_tokens_details.cached_tokens


def generated(response) -> list:
    """Every output item's type and text, ids left out."""
    out = []
    for item in response.output:
        parts = getattr(item, "content", None) or []
        out.append((item.type, [getattr(p, "text", None) for p in parts]))
    return out


def test_later_turns_are_served_from_the_cache_and_answer_as_a_cold_server(
        model_dir, cached_server, cold_server):
    """Turn N+1 reuses all of turn N's prompt up to its generation prompt (the template
    re-renders turn N's answer without its reasoning, so that is prefilled again); outputs
    and input counts equal a server without a prompt cache."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    generation_prompt = len(tokenizer.encode("<|im_start|>assistant\n<think>\n",
                                             add_special_tokens=False))
    before = cached_server.health()["prompt_cache"]
    warm = chain(cached_server, ASKS)
    cold = chain(cold_server, ASKS)
    assert [cached(r) for r in cold] == [0, 0, 0]
    assert cached(warm[0]) == 0
    for previous, turn in zip(warm, warm[1:]):
        assert cached(turn) == previous.usage.input_tokens - generation_prompt > 0
    assert [r.usage.input_tokens for r in warm] == [r.usage.input_tokens for r in cold]
    assert [generated(r) for r in warm] == [generated(r) for r in cold]
    after = cached_server.health()["prompt_cache"]
    assert after["hits"] == before["hits"] + 2
    assert after["cached_tokens"] == before["cached_tokens"] + sum(cached(r) for r in warm)


def test_a_resent_prompt_is_served_from_its_own_snapshot(cached_server):
    """The same request again: everything up to its generation prompt comes from the cache
    (the recurrent state cannot give back the last token, so a prompt is never served whole)."""
    client = cached_server.client()
    body = dict(model="hybrid-tiny", instructions=INSTRUCTIONS, input="Reply with: kelp",
                max_output_tokens=8, temperature=0)
    first = client.responses.create(**body)
    second = client.responses.create(**body)
    assert cached(first) == 0
    assert 0 < cached(second) < second.usage.input_tokens
    assert generated(first) == generated(second)


def test_a_prompt_cache_key_keeps_its_own_snapshots(cached_server):
    """Snapshots live in the request's namespace like any entry."""
    first, second = chain(cached_server, ASKS[:2], prompt_cache_key="hybrid-team")
    assert cached(first) == 0 and cached(second) > 0


def sliding_model(kind: str, directory):
    if kind == "gpt_oss":
        from ..fixtures import gpt_oss

        return gpt_oss.build_gpt_oss(directory / kind)
    from ..fixtures import families

    return families.build(families.FAMILIES[kind], directory / kind)


@pytest.mark.parametrize("kind", ["gpt_oss", "function_gemma"])
def test_a_chain_past_a_sliding_window_is_served_from_the_cache(kind, tmp_path):
    """Sliding-window layers (gpt-oss: 128 tokens, harmony rendered by triode; Gemma 3: 64)
    cannot be trimmed once wrapped, and these templates do not render the answer back as it
    was generated: on main the next turn reused nothing. Now it reuses the previous prompt to
    its last message's end, and answers as a server without a prompt cache."""
    model_dir = sliding_model(kind, tmp_path)
    runs = {}
    for name, flags in (("warm", []), ("cold", ["--prompt-cache-bytes", "0"])):
        with run_server("--model", str(model_dir), *flags) as server:
            client = server.client()
            responses, previous = [], None
            for ask in ASKS[:2]:
                more = {"previous_response_id": previous} if previous else {}
                r = client.responses.create(model=kind, instructions=INSTRUCTIONS, input=ask,
                                            max_output_tokens=12, temperature=0, **more)
                responses.append(r)
                previous = r.id
            runs[name] = responses
    first, second = runs["warm"]
    assert first.usage.input_tokens > 128 and cached(first) == 0
    assert 0 < cached(second) < first.usage.input_tokens
    assert [generated(r) for r in runs["warm"]] == [generated(r) for r in runs["cold"]]
