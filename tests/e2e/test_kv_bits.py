"""`--kv-bits 8` end to end: a server whose batched KV cache is quantized answers the bundled
model's tasks exactly, concurrently, and its prompt cache reuses quantized caches."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from ..conftest import run_server

MODEL = "triode-tiny"
ANSWERS = ["amber kite", "violet river copper lantern 42", "zq", "marble 7 sun field moss",
           "cedar 19 plume", "quartz meadow ember"]


@pytest.fixture(scope="module")
def quantized():
    with run_server("--kv-bits", "8", "--parallel", "4") as server:
        yield server


def test_concurrent_answers_are_exact(quantized):
    client = quantized.client()
    with ThreadPoolExecutor(len(ANSWERS)) as pool:
        texts = list(pool.map(lambda a: client.responses.create(
            model=MODEL, input=f"Reply with: {a}").output_text, ANSWERS))
    assert texts == ANSWERS


def test_a_chained_turn_reuses_the_quantized_cache(quantized):
    client = quantized.client()
    first = client.responses.create(model=MODEL, input="Reply with: juniper harbor")
    second = client.responses.create(model=MODEL, input="Reply with: cobalt dune",
                                     previous_response_id=first.id)
    assert (first.output_text, second.output_text) == ("juniper harbor", "cobalt dune")
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    assert quantized.health()["prompt_cache"]["bytes"] > 0
