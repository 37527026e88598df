"""The batched quantized KV cache (`--kv-bits`) on the bundled model: it computes what
mlx-lm's one-sequence quantized cache computes, survives every batch operation the
generator performs, and takes the bytes it should."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from mlx_lm.generate import BatchGenerator  # noqa: E402
from mlx_lm.models.cache import QuantizedKVCache, make_prompt_cache  # noqa: E402

from triode.model.kvquant import (BatchQuantizedKVCache, SequenceQuantizedKVCache,  # noqa: E402
                                  quantized_cache)
from triode.model.loading import BUNDLED_PATH, load  # noqa: E402


@pytest.fixture(scope="module")
def bundled():
    return load(str(BUNDLED_PATH))


def render(tokenizer, text: str) -> list[int]:
    return list(tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                              add_generation_prompt=True))


ANSWERS = ["amber kite", "violet river copper lantern 42", "zq", "marble 7 sun field moss"]


@pytest.mark.parametrize("bits", [8, 4])
def test_logits_equal_mlx_lms_one_sequence_quantized_cache(bundled, bits):
    """A batch of one, prefilled then decoded a token at a time, against mlx-lm's own
    QuantizedKVCache fed the same tokens: the same logits."""
    model, tokenizer = bundled
    tokens = render(tokenizer, "Reply with: amber kite violet")
    ours = [BatchQuantizedKVCache([0], bits=bits) for _ in model.layers]
    theirs = [QuantizedKVCache(group_size=64, bits=bits) for _ in model.layers]
    for chunk in (tokens[:-3], tokens[-3:-1], tokens[-1:]):
        a = model(mx.array([chunk]), cache=ours)
        b = model(mx.array([chunk]), cache=theirs)
        assert mx.allclose(a, b, atol=1e-5).item()


def generate(model, tokenizer, prompts, *, bits, insert_later=(), remove=None, caches=None):
    """Greedy answers through mlx-lm's BatchGenerator with quantized caches (or plain ones
    when bits is 0); `insert_later` prompts join after 3 steps; uid `remove` leaves after 5."""
    gen = BatchGenerator(model, stop_tokens=[[tokenizer.eos_token_id]],
                         completion_batch_size=8, prefill_batch_size=8)
    new = (lambda: quantized_cache(model, bits)) if bits else (lambda: None)
    uids = gen.insert(prompts, [64] * len(prompts),
                      caches=caches or [new() for _ in prompts])
    out: dict[int, list[int]] = {u: [] for u in uids}
    kept = {}
    steps = 0
    while len(kept) < len(out):
        steps += 1
        if steps == 3 and insert_later:
            later = gen.insert(list(insert_later), [64] * len(insert_later),
                               caches=[new() for _ in insert_later])
            out.update({u: [] for u in later})
        if steps == 5 and remove is not None:
            gen.remove([remove])
            kept[remove] = None
        for r in gen.next()[1]:
            if r.finish_reason != "stop":
                out[r.uid].append(r.token)
            if r.finish_reason:
                kept[r.uid] = r.prompt_cache
    gen.close()
    return {u: tokenizer.decode(t) for u, t in out.items()}, kept


def test_a_batch_of_different_lengths_answers_exactly(bundled):
    model, tokenizer = bundled
    prompts = [render(tokenizer, f"Reply with: {a}") for a in ANSWERS]
    texts, kept = generate(model, tokenizer, prompts, bits=8)
    assert list(texts.values()) == ANSWERS
    # A finished sequence's cache comes back as one sequence's quantized cache.
    assert all(isinstance(c, SequenceQuantizedKVCache) for caches in kept.values()
               for c in caches)


def test_joining_and_leaving_mid_run(bundled):
    model, tokenizer = bundled
    first = [render(tokenizer, f"Reply with: {a}") for a in ANSWERS[:2]]
    later = [render(tokenizer, f"Reply with: {a}") for a in ANSWERS[2:]]
    texts, _ = generate(model, tokenizer, first + [render(tokenizer, "Reply with: gone soon")],
                        bits=8, insert_later=later, remove=2)
    assert [texts[u] for u in (0, 1, 3, 4)] == ANSWERS[0:2] + ANSWERS[2:]


def test_a_kept_cache_continues_as_a_prefill_would(bundled):
    """The prompt cache's reuse: a finished sequence's quantized cache, trimmed to a shared
    prefix and merged into a new batch, answers as a fresh prefill does."""
    model, tokenizer = bundled
    prompt = render(tokenizer, "Reply with: cedar 19 plume")
    _, kept = generate(model, tokenizer, [prompt], bits=8)
    (cache,) = kept.values()
    for c in cache:
        c.trim(c.offset - (len(prompt) - 1))     # keep all but the last prompt token
    texts, _ = generate(model, tokenizer, [prompt[-1:]], bits=8, caches=[cache])
    assert list(texts.values()) == ["cedar 19 plume"]


@pytest.mark.parametrize("bits", [8, 4])
def test_bytes_per_token(bundled, bits):
    """Per head and token, 64 float32 values (256 bytes) become 64 x bits packed bits plus a
    float32 scale and bias per group of 64."""
    model, tokenizer = bundled
    tokens = render(tokenizer, "Reply with: amber")
    plain = make_prompt_cache(model)
    quant = [BatchQuantizedKVCache([0], bits=bits) for _ in model.layers]
    model(mx.array([tokens]), cache=plain)
    model(mx.array([tokens]), cache=quant)
    per_head_token = 64 * bits // 8 + 2 * 4
    plain_bytes = sum(c.keys[..., :c.offset, :].nbytes * 2 for c in plain)
    quant_bytes = sum(sum(x[..., :c._idx, :].nbytes for x in (*c.keys, *c.values))
                      for c in quant)
    assert quant_bytes * 256 == plain_bytes * per_head_token


def test_models_with_their_own_caches_are_refused(bundled):
    model, _ = bundled

    class Sliding:
        args = model.args
        layers = model.layers

        def make_cache(self):
            return []

    with pytest.raises(ValueError, match="--kv-bits needs a model whose layers"):
        quantized_cache(Sliding(), 8)
