"""The engine's prompt cache on the bundled model's real KV caches: what a prompt reuses, and
the byte budget at its edges."""

import pytest

mx = pytest.importorskip("mlx.core")

from triode.model.prompt_cache import PromptCache  # noqa: E402
from triode.model.loading import BUNDLED_PATH, load  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return load(str(BUNDLED_PATH))[0]


def kv_for(model, tokens: list[int]):
    """The KV cache a finished sequence leaves: every token of it run through the model."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([tokens]), cache=cache))
    return cache


def nbytes(kv) -> int:
    return sum(c.nbytes for c in kv)


SEQ = list(range(10, 40))   # a finished sequence: prompt and output, 30 tokens


def test_a_prompt_extending_a_kept_sequence_prefills_only_the_rest(model):
    cache = PromptCache(1 << 30)
    cache.keep(SEQ, kv_for(model, SEQ))
    kv, rest = cache.fetch(SEQ + [50, 51, 52])
    assert rest == [50, 51, 52]
    assert kv[0].offset == len(SEQ)


def test_an_identical_prompt_still_feeds_its_last_token(model):
    """The first output token is sampled from the last prompt token's logits, so a fully
    cached prompt gives that token back to the model (the cache trimmed by one)."""
    cache = PromptCache(1 << 30)
    cache.keep(SEQ, kv_for(model, SEQ))
    kv, rest = cache.fetch(list(SEQ))
    assert rest == SEQ[-1:]
    assert kv[0].offset == len(SEQ) - 1


def test_a_prompt_diverging_inside_a_kept_sequence_reuses_the_common_prefix(model):
    cache = PromptCache(1 << 30)
    cache.keep(SEQ, kv_for(model, SEQ))
    prompt = SEQ[:12] + [99, 98]
    kv, rest = cache.fetch(prompt)
    assert rest == [99, 98]
    assert kv[0].offset == 12


def test_reused_cache_gives_the_same_logits_as_a_full_prefill(model):
    """Reuse is exact: the next token's logits from cache + rest equal a full prefill's."""
    cache = PromptCache(1 << 30)
    cache.keep(SEQ, kv_for(model, SEQ))
    prompt = SEQ + [50, 51]
    kv, rest = cache.fetch(prompt)
    reused = model(mx.array([rest]), cache=kv)[0, -1]
    full = model(mx.array([prompt]))[0, -1]
    assert mx.allclose(reused, full, atol=1e-4).item()
    assert mx.argmax(reused).item() == mx.argmax(full).item()


def test_unrelated_prompt_gets_nothing(model):
    cache = PromptCache(1 << 30)
    cache.keep(SEQ, kv_for(model, SEQ))
    assert cache.fetch([7, 8, 9]) == (None, [7, 8, 9])


@pytest.mark.parametrize("slack, kept", [(0, 1), (-1, 0), (1, 1)])
def test_byte_budget_edges(model, slack, kept):
    """A sequence exactly at the budget is kept; one byte over it is not."""
    kv = kv_for(model, SEQ)
    size = nbytes(kv)
    cache = PromptCache(size + slack)
    cache.keep(SEQ, kv)
    assert len(cache) == kept
    assert cache.nbytes == (size if kept else 0)


def test_budget_evicts_least_recently_used(model):
    first, second = SEQ, list(range(100, 130))
    kv1, kv2 = kv_for(model, first), kv_for(model, second)
    cache = PromptCache(nbytes(kv1) + nbytes(kv2) - 1)   # room for one of the two
    cache.keep(first, kv1)
    cache.keep(second, kv2)
    assert len(cache) == 1
    assert cache.fetch(first + [5])[0] is None          # the older one went
    assert cache.fetch(second + [5])[1] == [5]


def test_a_sequence_over_the_budget_leaves_the_others_alone(model):
    """mlx-lm's LRU would insert it and evict least recently used entries until the bytes
    fit, which empties the cache before it finally drops the newcomer."""
    small, big = SEQ, list(range(100, 400))   # KVCache allocates 256 positions at a time
    kv_small, kv_big = kv_for(model, small), kv_for(model, big)
    assert nbytes(kv_big) > nbytes(kv_small) + 1
    cache = PromptCache(nbytes(kv_small) + 1)
    cache.keep(small, kv_small)
    cache.keep(big, kv_big)
    assert len(cache) == 1 and cache.nbytes == nbytes(kv_small)
    assert cache.fetch(small + [5])[1] == [5]
