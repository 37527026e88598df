"""`--attention-window N` on the real engine and the bundled model: below N tokens nothing
changes; past N, what the batched engine decodes (chunked prefill, several sequences, left
padding) is exactly what the model computes with an explicit sliding-window mask."""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core")

import mlx.core as mx  # noqa: E402
from mlx_lm.models.base import create_causal_mask  # noqa: E402

from triode.model.engine import Engine, EngineOptions, Insert, StepOutput  # noqa: E402
from triode.model.loading import BUNDLED_PATH, load  # noqa: E402
from triode.model.request import GenerationRequest, Sampling  # noqa: E402
from triode.model.window import window_caches  # noqa: E402

GREEDY = Sampling(temperature=0.0)
WINDOW = 64
MAX_TOKENS = 24


class Done(Exception):
    pass


def decode(prompts: list[list[int]], *, window: int, prefill_chunk: int = 0
           ) -> list[list[int]]:
    """Every prompt's greedy tokens from one engine, all inserted together."""
    engine = Engine(EngineOptions(model=str(BUNDLED_PATH), parallel=4,
                                  prefill_chunk=prefill_chunk, attention_window=window))
    tokens: dict[int, list[int]] = {uid: [] for uid in range(len(prompts))}
    finished: set[int] = set()
    state = {"inserted": False}

    def exchange(outputs: list[StepOutput], idle: bool, cache: object,
                 speculation: object = None) -> list[Insert]:
        for out in outputs:
            if out.finish_reason != "stop":
                tokens[out.uid].append(out.token)
            if out.finish_reason is not None:
                finished.add(out.uid)
        if len(finished) == len(prompts):
            raise Done
        if state["inserted"]:
            return []
        state["inserted"] = True
        return [Insert(uid, GenerationRequest(prompt=p, max_tokens=MAX_TOKENS, sampling=GREEDY))
                for uid, p in enumerate(prompts)]

    with pytest.raises(Done):
        engine.run(exchange, lambda info, tokenizer: None)
    return [tokens[uid] for uid in range(len(prompts))]


@pytest.fixture(scope="module")
def bundled():
    return load(str(BUNDLED_PATH))   # triode's loader: it trusts the bundled model


def sliding_reference(model, tokenizer, prompt: list[int], window: int) -> list[int]:
    """Greedy decoding by full forward passes under create_causal_mask(window_size=window):
    no cache at all, so nothing the engine does is assumed."""
    inner = model.model
    ids = list(prompt)
    out: list[int] = []
    for _ in range(MAX_TOKENS):
        h = inner.embed_tokens(mx.array(ids)[None])
        mask = create_causal_mask(len(ids), 0, window_size=window)
        for layer in inner.layers:
            h = layer(h, mask, None)
        logits = inner.embed_tokens.as_linear(inner.norm(h[:, -1:]))
        token = int(mx.argmax(logits[0, -1]).item())
        if token in tokenizer.eos_token_ids:
            break
        out.append(token)
        ids.append(token)
    return out


@pytest.fixture(scope="module")
def prompts(bundled):
    _, tokenizer = bundled

    def render(*texts: str) -> list[int]:
        turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                 for i, t in enumerate(texts)]
        return list(tokenizer.apply_chat_template(turns, add_generation_prompt=True))

    words = "amber kite violet river copper lantern".split()
    filler = " ".join(words[(i * 5) % 6] + str(i % 7) for i in range(30))
    short = render("Reply with: amber kite")
    # The first answer is more than WINDOW tokens back when the last question asks for it.
    long = render("Reply with: marble 7 sun", "marble 7 sun", f"Reply with: {filler}", filler,
                  "Repeat your first answer.")
    assert len(short) + MAX_TOKENS < WINDOW < len(long)
    return short, long


def test_below_the_window_nothing_changes(prompts):
    """A window longer than prompt and output: the same tokens as the model's own attention."""
    short, long = prompts
    assert len(long) + MAX_TOKENS < 512
    assert decode([short, long], window=512) == decode([short, long], window=0)


def test_past_the_window_each_token_sees_the_last_n(bundled, prompts):
    """Batched with a short prompt, prefilled in chunks that cross the window: the long
    prompt's tokens are the sliding-window reference's, which full attention's are not."""
    model, tokenizer = bundled
    short, long = prompts
    windowed = decode([short, long], window=WINDOW, prefill_chunk=48)
    assert windowed == [sliding_reference(model, tokenizer, p, WINDOW) for p in (short, long)]
    assert windowed[1] != decode([long], window=0)[0]   # the window did change something


def test_a_model_that_makes_its_own_caches_is_refused(bundled):
    model, _ = bundled

    class OwnCaches:
        layers = model.layers

        def make_cache(self) -> list[object]:
            return []

    assert len(window_caches(model, WINDOW)) == len(model.layers)
    with pytest.raises(ValueError, match="--attention-window needs a model whose layers all "
                       "use a plain KV cache"):
        window_caches(OwnCaches(), WINDOW)
