"""M-RoPE (model/mrope.py) in the batched engine, on the Qwen2-VL, Qwen2.5-VL and Qwen3-VL
fixtures (tests/fixtures/qwen_vl.py): prompts with images batched with each other and with text,
prefilled in chunks that split images, decoded plainly or speculatively, generate exactly what
mlx-vlm's own generation does alone; each sequence's position delta lives in its cache (it
survives extraction and trimming); speculation never drafts an image's ids."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from ..fixtures import qwen_vl  # noqa: E402
from ..fixtures.media import data_url, image_bytes  # noqa: E402
from triode.model.vision import load_vision, prompter_of  # noqa: E402

TOKENS = 8


@pytest.fixture(scope="module", params=qwen_vl.KINDS)
def loaded(request, tmp_path_factory):
    return load_vision(str(qwen_vl.build(tmp_path_factory.mktemp(request.param),
                                         request.param)))


def image(seed: int, width: int, height: int) -> dict:
    return {"type": "image", "image_url": data_url(image_bytes(width, height, seed=seed),
                                                   "image/png")}


def prompt(tokenizer, *parts, text: str = "What is it?"):
    """The chat template over one user message of `parts` (images) then `text`: the
    prompt's tokens with each image widened, and the image spans."""
    content = [{"type": "image"} for _ in parts] + [{"type": "text", "text": text}]
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                             add_generation_prompt=True, tokenize=False)
    tokens = tokenizer.encode(rendered, add_special_tokens=False)
    if not parts:
        return tokens, ()
    return prompter_of(tokenizer).expand(tokens, list(parts), rendered)


def mlx_vlm_greedy(model, tokens, spans, n: int = TOKENS) -> list[int]:
    """mlx-vlm's own generation, alone: the prefill over the input embeddings with the
    images' grids (its get_rope_index), then one token at a time from its cache (its rope
    deltas)."""
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache

    lm = model.language_model
    lm._position_ids = lm._rope_deltas = None   # a new generation (not the last one's)
    cache = make_prompt_cache(lm)
    ids = mx.array([tokens])
    if spans:
        pixels = mx.array(np.concatenate([s.pixels for s in spans]))
        grid = mx.array([s.grid for s in spans])
        embedded = model.get_input_embeddings(ids, pixels, image_grid_thw=grid)
        deep = {}   # Qwen3-VL: the deepstack features and where they go
        if getattr(embedded, "deepstack_visual_embeds", None) is not None:
            deep = {"visual_pos_masks": embedded.visual_pos_masks,
                    "deepstack_visual_embeds": embedded.deepstack_visual_embeds}
        logits = lm(ids, inputs_embeds=embedded.inputs_embeds, cache=cache,
                    pixel_values=pixels, image_grid_thw=grid, **deep).logits
    else:
        logits = lm(ids, cache=cache).logits
    out = []
    for _ in range(n):
        token = int(mx.argmax(logits[0, -1]).item())
        out.append(token)
        logits = lm(mx.array([[token]]), cache=cache).logits
    return out


def generate(lm, prompts, *, chunk: int, speculative: bool = False, n: int = TOKENS,
             vocabulary: int | None = None):
    """Greedy tokens of `prompts` run together through mlx-lm's BatchGenerator (the
    engine's), prefilled `chunk` tokens at a time; with `speculative`, the engine's
    prompt-lookup decoding installed, as the engine installs it (drafts end before
    `vocabulary`, the image rows' ids). Returns the tokens and the batch's counts."""
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    from triode.model import speculative as spec

    gen = BatchGenerator(lm, stop_tokens=[], completion_batch_size=4, prefill_batch_size=4,
                         prefill_step_size=chunk)
    if speculative:
        # drafting always looks worth it
        spec.install(gen, knee=1e6, learn=False, vocabulary=vocabulary)
    greedy = make_sampler(temp=0.0)
    uids = gen.insert(prompts, [n] * len(prompts), samplers=[greedy] * len(prompts))
    out: dict[int, list[int]] = {u: [] for u in uids}
    while any(len(v) < n for v in out.values()):
        _, responses = gen.next()
        for r in responses:
            out[r.uid].append(r.token)
    counts = dict(getattr(gen._generation_batch, "counts", {}))
    gen.close()
    return [out[u] for u in uids], counts


@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "speculative"])
def test_image_and_text_prompts_batched_generate_what_mlx_vlm_does_alone(loaded, speculative):
    """Two image prompts (one with two images of other sizes) and a text prompt, prefilled
    together 16 tokens at a time (chunks end inside images) and decoded together: each
    gives mlx-vlm's own greedy tokens for it alone. Speculative decoding runs longer, so
    the random model's outputs repeat themselves and drafts are verified."""
    lm, tokenizer, vision = loaded
    prompts = [prompt(tokenizer, image(1, 70, 50)),
               prompt(tokenizer, image(2, 30, 90), image(3, 40, 40), text="Compare them."),
               prompt(tokenizer, text="Say something about nothing at all, please.")]
    n = 32 if speculative else TOKENS
    theirs = [mlx_vlm_greedy(vision.model, tokens, spans, n) for tokens, spans in prompts]
    placed = [vision.place(tokens, spans) for tokens, spans in prompts]
    ours, counts = generate(lm, placed, chunk=16, speculative=speculative, n=n,
                            vocabulary=vision.rows.first)
    assert ours == theirs
    if speculative:
        assert counts["speculative"] > 0


def test_a_sequence_s_delta_is_in_its_cache_and_trims_with_it(loaded):
    """After an image prompt's prefill the cache's position layer holds its delta
    (max(h, w) - h * w per image); extracted alone, trimmed back to before the image it is
    0 again, and the continuation from a trimmed cache is the continuation from scratch."""
    from mlx_lm.models.cache import make_prompt_cache

    from triode.model.mrope import current_delta

    lm, tokenizer, vision = loaded
    tokens, [span] = prompt(tokenizer, image(4, 70, 50))
    placed = vision.place(tokens, [span])
    h, w = span.grid[1] // 2, span.grid[2] // 2
    cache = make_prompt_cache(lm)
    assert len(cache) == len(lm.layers) + 1
    lm(mx.array([placed]), cache=cache)
    assert current_delta(cache[-1], 1).item() == max(h, w) - h * w < 0
    after = len(placed) - (span.start + span.length)
    for c in cache:
        c.trim(after + span.length // 2)   # back into the image
    assert current_delta(cache[-1], 1).item() == 0
    rest = mx.array([placed[len(placed) - after - span.length // 2:]])
    resumed = lm(rest, cache=cache)[:, -1]
    fresh = lm(mx.array([placed]), cache=make_prompt_cache(lm))[:, -1]
    assert mx.allclose(resumed, fresh, atol=1e-5).item()


def test_text_only_positions_are_plain_rope(loaded):
    """A text prompt's three positions are equal (its index): the model computes what
    mlx-vlm's language model computes without images."""
    lm, tokenizer, vision = loaded
    tokens, _ = prompt(tokenizer, text="Only text here.")
    positions, deltas = lm.positions(mx.array([tokens]), None, None)
    assert positions.tolist() == [[list(range(len(tokens)))]] * 3
    assert deltas.tolist() == [[0] * len(tokens)]
    theirs = vision.model.language_model(mx.array([tokens])).logits
    assert mx.allclose(lm(mx.array([tokens])), theirs, atol=1e-5).item()


def test_image_positions_follow_the_grid(loaded):
    """An image of h x w tokens after text ending at position p - 1: its row k = (r, c) is
    at (p, p + r, p + c), and the text after it resumes at p + max(h, w)."""
    lm, tokenizer, vision = loaded
    tokens, [span] = prompt(tokenizer, image(5, 30, 90))
    placed = vision.place(tokens, [span])
    positions, deltas = lm.positions(mx.array([placed]), None, None)
    t, r, c = (p[0] for p in positions.tolist())
    h, w = span.grid[1] // 2, span.grid[2] // 2
    p = span.start
    assert t[:p] == r[:p] == c[:p] == list(range(p))
    rows = range(span.length)
    assert t[p:p + span.length] == [p] * span.length
    assert r[p:p + span.length] == [p + k // w for k in rows]
    assert c[p:p + span.length] == [p + k % w for k in rows]
    end = p + span.length
    assert t[end:] == r[end:] == c[end:] == \
        list(range(p + max(h, w), p + max(h, w) + len(placed) - end))
    assert deltas.tolist()[0][end - 1:] == [max(h, w) - h * w] * (len(placed) - end + 1)


def test_drafts_never_hold_an_image_s_ids():
    """Prompt lookup proposes what followed an earlier occurrence: a run that continues
    into ids at or past the vocabulary (image rows, never sampled) stops before them."""
    from triode.model.speculative import NgramIndex

    tokens = [1, 2, 3, 7, 900, 901, 5, 1, 2, 3]
    assert NgramIndex(tokens).propose(4) == [7, 900, 901, 5]
    assert NgramIndex(tokens, vocabulary=900).propose(4) == [7]
    assert NgramIndex([1, 2, 900, 1, 2], vocabulary=900).propose(3) == []


def test_an_image_the_vision_tower_fails_on_fails_its_request_alone(tmp_path, monkeypatch):
    """On the engine itself: a request whose image cannot be encoded ends at once with the
    error (its response fails), and a text request beside it, and one after it, generate:
    the engine serves on."""
    from triode.model.engine import Engine, EngineOptions, Insert
    from triode.model.request import GenerationRequest, Sampling
    from triode.model.vision import Vision

    directory = qwen_vl.build(tmp_path / "qwen2-vl")
    _, tokenizer, _ = load_vision(str(directory))
    image_tokens, spans = prompt(tokenizer, image(9, 40, 40))
    text_tokens, _ = prompt(tokenizer, text="Hello there.")

    def broken(self, tokens, images):
        raise RuntimeError("the vision tower broke")
    monkeypatch.setattr(Vision, "place", broken)
    greedy = Sampling(temperature=0.0)
    outputs: dict[int, list] = {1: [], 2: [], 3: []}

    class Done(Exception):
        pass

    def exchange(step_outputs, idle, cache, speculation=None):
        for out in step_outputs:
            outputs[out.uid].append(out)
        if not any(outputs.values()) and not exchange.sent:
            exchange.sent = True
            return [Insert(1, GenerationRequest(prompt=image_tokens, max_tokens=4,
                                                sampling=greedy, images=spans)),
                    Insert(2, GenerationRequest(prompt=text_tokens, max_tokens=4,
                                                sampling=greedy))]
        if outputs[2] and outputs[2][-1].finish_reason and not outputs[3]:
            if not exchange.third:
                exchange.third = True
                return [Insert(3, GenerationRequest(prompt=text_tokens, max_tokens=4,
                                                    sampling=greedy))]
        if outputs[3] and outputs[3][-1].finish_reason:
            raise Done
        return []
    exchange.sent = exchange.third = False

    engine = Engine(EngineOptions(model=str(directory), parallel=4))
    with pytest.raises(Done):
        engine.run(exchange, lambda info, tokenizer: None)
    [failed] = outputs[1]
    assert failed.finish_reason == "stop"
    assert failed.error == "its images could not be encoded (the vision tower broke)"
    for uid in (2, 3):
        assert outputs[uid][-1].finish_reason == "length" and len(outputs[uid]) == 4
        assert all(o.error is None for o in outputs[uid])


def test_kv_bits_and_attention_windows_are_refused_with_the_reason(loaded):
    """Neither a quantized nor a rotating cache may replace the position layer: both flags
    refuse an M-RoPE model at load, naming why."""
    from triode.model.kvquant import quantized_cache
    from triode.model.window import window_caches

    lm, _, _ = loaded
    with pytest.raises(ValueError, match="--kv-bits.*M-RoPE positions"):
        quantized_cache(lm, 8)
    with pytest.raises(ValueError, match="--attention-window.*M-RoPE positions"):
        window_caches(lm, 64)
