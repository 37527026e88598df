"""OpenAI's presence and frequency penalties: the processor's formula, and the context the real
engine gives it (the prompt, then the generated tokens), with the prompt cache and with
speculative decoding."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from triode.model import engine as engine_module  # noqa: E402
from triode.model.engine import (Engine, EngineOptions, Insert, StepOutput, logits_processors_for,  # noqa: E402
                                 openai_penalties, sampler_for)
from triode.model.loading import BUNDLED_PATH, load  # noqa: E402
from triode.model.request import GenerationRequest, Sampling  # noqa: E402

VOCAB = 10


def test_a_generated_token_loses_presence_plus_frequency_times_its_count():
    """logit -= presence * (count > 0) + frequency * count, counting generated tokens only:
    tokens of the prompt (the first `prompt_length`) are not penalized for being there."""
    logits = mx.arange(VOCAB, dtype=mx.float32)[None]
    penalize = openai_penalties(0.5, 0.25, prompt_length=3)
    context = mx.array([5, 6, 1, 1, 2, 1, 6], dtype=mx.int32)   # prompt 5 6 1; then 1 2 1 6
    out = penalize(context, logits).tolist()[0]
    expected = list(map(float, range(VOCAB)))
    expected[1] -= 0.5 + 0.25 * 2
    expected[2] -= 0.5 + 0.25
    expected[6] -= 0.5 + 0.25
    assert out == pytest.approx(expected)


def test_nothing_is_penalized_before_the_first_generated_token():
    logits = mx.arange(VOCAB, dtype=mx.float32)[None]
    out = openai_penalties(2.0, 2.0, prompt_length=3)(mx.array([1, 2, 3]), logits)
    assert out.tolist() == logits.tolist()


def test_negative_penalties_raise_the_logits_of_repeated_tokens():
    logits = mx.zeros((1, VOCAB))
    out = openai_penalties(-1.0, -0.5, prompt_length=0)(mx.array([4, 4, 4]), logits)
    assert out.tolist()[0][4] == pytest.approx(2.5)
    assert out.tolist()[0][3] == 0


def test_penalties_run_before_the_grammar_and_share_no_sampler():
    """The penalty processor comes before the constrained-decoding one (it must see the final
    logits), and a request's penalties do not split the batch's shared sampler."""
    plain = GenerationRequest(prompt=[1, 2], max_tokens=4)
    assert logits_processors_for(plain, None) == ([], None)
    penalized = GenerationRequest(prompt=[1, 2], max_tokens=4,
                                  sampling=Sampling(presence_penalty=0.1, frequency_penalty=0.2))
    processors, constraint = logits_processors_for(penalized, None)
    assert len(processors) == 1 and constraint is None
    assert sampler_for(penalized.sampling) is sampler_for(plain.sampling)


class Done(Exception):
    pass


def contexts_seen(monkeypatch, prompts: list[list[int]], *, speculative: str = "off",
                  prompt_cache_bytes: int = 0) -> list[tuple[list[list[int]], list[int]]]:
    """Runs each prompt in turn (greedy, a frequency penalty) on the real engine; for each,
    the contexts its penalty processor was called with and the tokens it generated."""
    seen: list[list[list[int]]] = []

    def recording(presence, frequency, prompt_length):
        calls: list[list[int]] = []
        seen.append(calls)
        penalize = openai_penalties(presence, frequency, prompt_length)

        def processor(tokens, logits):
            calls.append(list(tokens.tolist()))
            return penalize(tokens, logits)
        return processor

    monkeypatch.setattr(engine_module, "openai_penalties", recording)
    engine = Engine(EngineOptions(model=str(BUNDLED_PATH), parallel=2,
                                  prompt_cache_bytes=prompt_cache_bytes,
                                  speculative=speculative))
    generated: list[list[int]] = [[] for _ in prompts]
    pending = list(enumerate(prompts))

    def exchange(outputs: list[StepOutput], idle: bool, cache: object,
                 speculation: object = None) -> list[Insert]:
        for out in outputs:
            if out.finish_reason != "stop":
                generated[out.uid].append(out.token)
            if out.finish_reason is not None and not pending:
                raise Done
        if not idle:
            return []
        uid, prompt = pending.pop(0)
        sampling = Sampling(temperature=0.0, frequency_penalty=0.5)
        return [Insert(uid, GenerationRequest(prompt=prompt, max_tokens=12, sampling=sampling))]

    with pytest.raises(Done):
        engine.run(exchange, lambda info, tokenizer: None)
    return list(zip(seen, generated))


@pytest.fixture(scope="module")
def prompt():
    _, tokenizer = load(str(BUNDLED_PATH))
    return list(tokenizer.apply_chat_template(
        [{"role": "user", "content": "Reply with: a a a a a a a a"}], add_generation_prompt=True))


@pytest.mark.parametrize("speculative", ["off", "ngram"])
def test_the_processor_sees_the_prompt_then_the_generated_tokens(monkeypatch, prompt,
                                                                 speculative):
    """At the k-th sampled token the context is the whole prompt and the k-1 tokens generated
    before it, so `prompt_length` splits it exactly; a second run whose prompt the prompt
    cache supplies sees the same (the cached prefix is part of the context)."""
    runs = contexts_seen(monkeypatch, [prompt, prompt], speculative=speculative,
                         prompt_cache_bytes=1 << 28)
    for calls, tokens in runs:
        assert tokens and len(calls) >= len(tokens)
        for k, context in enumerate(calls[:len(tokens)]):
            assert context == prompt + tokens[:k]
