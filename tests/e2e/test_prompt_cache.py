"""The prompt cache end to end: usage reports the prompt tokens a request did not prefill, a
conversation's next turn reuses the previous turn, answers do not change, and
`--prompt-cache-bytes 0` turns it (and the reasoning echo that serves it) off."""

from __future__ import annotations

import pytest

from ..conftest import run_server

MODEL = "triode-tiny"


def cached(response) -> int:
    return response.usage.input_tokens_details.cached_tokens


def test_a_repeated_prompt_reuses_all_but_its_last_token(server, client):
    before = server.health()["prompt_cache"]
    first = client.responses.create(model=MODEL, input="Reply with: quartz meadow ember")
    second = client.responses.create(model=MODEL, input="Reply with: quartz meadow ember")
    assert first.output_text == second.output_text == "quartz meadow ember"
    assert second.usage.input_tokens == first.usage.input_tokens
    assert cached(second) == second.usage.input_tokens - 1
    after = server.health()["prompt_cache"]
    assert after["hits"] >= before["hits"] + 1
    assert after["cached_tokens"] >= before["cached_tokens"] + cached(second)
    assert 0 < after["bytes"] <= after["max_bytes"] and after["entries"] >= 1


def test_the_next_turn_of_a_chain_reuses_the_previous_turn(client):
    first = client.responses.create(model=MODEL, input="Reply with: juniper harbor")
    second = client.responses.create(model=MODEL, input="Reply with: cobalt dune",
                                     previous_response_id=first.id)
    assert second.output_text == "cobalt dune"
    # The whole first prompt and (most of) its answer are already in the cache.
    assert cached(second) >= first.usage.input_tokens


def test_streamed_usage_reports_cached_tokens_too(client):
    client.responses.create(model=MODEL, input="Reply with: saffron lotus kelp")
    with client.responses.stream(model=MODEL, input="Reply with: saffron lotus kelp") as s:
        final = s.get_final_response()
    assert final.output_text == "saffron lotus kelp"
    assert cached(final) == final.usage.input_tokens - 1


def test_prompt_cache_key_routes_the_cache(client):
    """A request's prompt_cache_key is its cache namespace: the same prompt under the same
    key reuses the cache; under a new key nothing is reused, and without a key only what
    the shared namespace holds (a common prefix of earlier prompts, not this prompt's
    entry); the key is echoed on the response."""
    prompt = "Reply with: walnut prism echo"
    first = client.responses.create(model=MODEL, input=prompt, prompt_cache_key="team-a")
    assert first.prompt_cache_key == "team-a" and cached(first) == 0
    same = client.responses.create(model=MODEL, input=prompt, prompt_cache_key="team-a")
    assert cached(same) == same.usage.input_tokens - 1
    other = client.responses.create(model=MODEL, input=prompt, prompt_cache_key="team-b")
    assert cached(other) == 0
    unkeyed = client.responses.create(model=MODEL, input=prompt)
    assert cached(unkeyed) < unkeyed.usage.input_tokens - 1
    assert first.output_text == same.output_text == other.output_text == unkeyed.output_text


@pytest.fixture(scope="module")
def uncached():
    with run_server("--prompt-cache-bytes", "0") as s:
        yield s


def test_zero_budget_turns_the_cache_and_the_reasoning_echo_off(uncached):
    client = uncached.client()
    for _ in range(2):
        r = client.responses.create(model=MODEL, input="Reply with: glacier orbit")
        assert r.output_text == "glacier orbit"
        assert cached(r) == 0
    health = uncached.health()
    assert health["prompt_cache"] == {"max_bytes": 0, "entries": 0, "bytes": 0, "hits": 0,
                                      "cached_tokens": 0, "disk_max_bytes": 0,
                                      "disk_entries": 0, "disk_bytes": 0, "disk_hits": 0,
                                      "disk_writes": 0, "disk_write_errors": 0,
                                      "disk_skipped": 0}
    assert health["stores"]["reasoning_echo"]["max_bytes"] == 0


def test_a_budget_smaller_than_any_sequence_keeps_nothing():
    """`--prompt-cache-bytes 1`: every finished sequence is over the budget, so none is kept
    and nothing is reused (the exact edges are in tests/model/test_prompt_cache.py)."""
    with run_server("--prompt-cache-bytes", "1") as s:
        client = s.client()
        for _ in range(2):
            r = client.responses.create(model=MODEL, input="Reply with: tulip marble")
            assert r.output_text == "tulip marble" and cached(r) == 0
        cache = s.health()["prompt_cache"]
        assert (cache["max_bytes"], cache["entries"], cache["bytes"], cache["hits"]) == (1, 0, 0, 0)
