"""A planned turn made ready to generate once its prompt is rendered: the room left for
output bounds its tokens, a prompt with no room is refused, and its prompt-cache key is its
tenant's. Nothing here depends on the model's tool-call format."""

from __future__ import annotations

import pytest

from triode.errors import ContextLengthExceeded
from triode.model.loading import ModelInfo
from triode.model.request import Rendered, Sampling
from triode.responses import translate, wire
from triode.responses.convert import structure
from triode.responses.prepared import finalize
from triode.tenants import scoped

INFO = ModelInfo(path="m", context_length=100, eos_token_ids=(0,), vocab_size=8)


def ready(prompt_tokens: int, **fields):
    plan = translate.plan(structure({"model": "m", "input": "hi", **fields},
                                    wire.CreateResponse), Sampling())
    return plan, Rendered(list(range(prompt_tokens)), "prompt")


def test_output_is_bounded_by_the_room_the_prompt_leaves():
    """max_tokens: the request's max_output_tokens, at most what the context has left; with
    none given, all of it."""
    assert finalize(*ready(60), INFO).generation.max_tokens == 40
    assert finalize(*ready(60, max_output_tokens=10), INFO).generation.max_tokens == 10
    assert finalize(*ready(60, max_output_tokens=500), INFO).generation.max_tokens == 40


def test_a_prompt_that_fills_the_context_is_refused():
    """No room for one token: a 400 context_length_exceeded naming `input`; one token of
    room is enough."""
    with pytest.raises(ContextLengthExceeded) as refused:
        finalize(*ready(100), INFO)
    assert refused.value.param == "input"
    assert finalize(*ready(99), INFO).generation.max_tokens == 1


def test_the_prompt_cache_key_is_the_tenant_s():
    """The request's prompt_cache_key, within its tenant's scope: two tenants never share
    a cache namespace, whatever key they send."""
    alice = finalize(*ready(10, prompt_cache_key="k"), INFO, cache_scope="alice")
    bob = finalize(*ready(10, prompt_cache_key="k"), INFO, cache_scope="bob")
    assert alice.generation.cache_key == scoped("alice", "k")
    assert alice.generation.cache_key != bob.generation.cache_key
    assert finalize(*ready(10), INFO).generation.cache_key == ""


def test_the_generation_carries_the_plan_s_prompt_sampling_and_stops():
    """The one GenerationRequest: the rendered tokens, the plan's sampling and stop
    sequences; a plain request has no grammar."""
    plan, rendered = ready(5, temperature=0.0, stop=["END"])
    prepared = finalize(plan, rendered, INFO)
    generation = prepared.generation
    assert list(generation.prompt) == rendered.tokens
    assert generation.sampling == plan.sampling
    assert generation.sampling.temperature == 0.0
    assert list(generation.stop) == ["END"]
    assert generation.grammar is None
    assert prepared.plan is plan and prepared.compaction is None
