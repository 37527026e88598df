"""A vision model served as text model + image rows (model/vision.py), on the fixture LLaVA
(tests/fixtures/vlm.py): the rebuilt mlx-lm language model with an image's rows computes
mlx-vlm's own logits, images are keyed by content, and batched prefill of an image prompt
beside a text prompt gives each its own unbatched result."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from ..fixtures import vlm  # noqa: E402
from ..fixtures.media import data_url, image_bytes  # noqa: E402
from triode.model.vision import ImageRows, load_vision, prompter_of  # noqa: E402


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load_vision(str(vlm.build(tmp_path_factory.mktemp("llava"))))


def image_prompt(tokenizer, seed: int = 0, detail: str = "auto"):
    prompter = prompter_of(tokenizer)
    text = "USER: <image>\nWhat is it?\nASSISTANT:"
    tokens = tokenizer.encode(text, add_special_tokens=False)
    image = {"type": "image", "image_url": data_url(image_bytes(70, 50, seed=seed),
                                                    "image/png"), "detail": detail}
    return prompter.expand(tokens, [image])


def test_an_image_is_a_run_of_its_tokens(loaded):
    """One `<image>` in the template becomes the processor's 16 tokens (4 x 4 patches)."""
    _, tokenizer, vision = loaded
    tokens, [span] = image_prompt(tokenizer)
    assert span.length == vlm.IMAGE_TOKENS
    assert tokens[span.start:span.start + span.length] == \
        [vision.image_token_id] * vlm.IMAGE_TOKENS
    assert tokens.count(vision.image_token_id) == vlm.IMAGE_TOKENS


def test_image_rows_give_mlx_vlm_s_own_logits(loaded):
    """The mlx-lm language model over the prompt with virtual ids computes what mlx-vlm's
    LLaVA forward pass computes from the image tokens and pixels."""
    lm, tokenizer, vision = loaded
    tokens, spans = image_prompt(tokenizer)
    placed = vision.place(tokens, spans)
    ours = lm(mx.array([placed]))
    theirs = vision.model(mx.array([tokens]), mx.array(spans[0].pixels), mask=None).logits
    assert mx.allclose(ours, theirs, atol=1e-4).item()
    assert not mx.allclose(ours, lm(mx.array([tokens])), atol=1e-2).item()  # the image matters


def test_images_are_keyed_by_content(loaded):
    """The same image gets the same virtual ids (no second vision pass); another image,
    other ids; `detail: low` shrinks the image first, so it is other content too."""
    _, tokenizer, vision = loaded
    tokens, spans = image_prompt(tokenizer, seed=1)
    before = vision.rows.computed
    first = vision.place(tokens, spans)
    again = vision.place(*image_prompt(tokenizer, seed=1))
    assert first == again and vision.rows.computed == before + 1
    other = vision.place(*image_prompt(tokenizer, seed=2))
    s = spans[0]
    assert other[:s.start] == first[:s.start]
    assert set(other[s.start:s.start + s.length]).isdisjoint(first[s.start:s.start + s.length])


def test_rows_overwritten_in_the_ring_are_computed_again():
    """An image whose rows are in the older half of the ring (next to be overwritten) is
    not reused; it is placed again under new ids."""
    import numpy as np

    from triode.model.request import ImageSpan

    rows = ImageRows(first=1000, capacity=16, start=0)
    a = ImageSpan(start=0, length=5, digest="a", pixels=np.zeros(1))
    b = ImageSpan(start=0, length=3, digest="b", pixels=np.zeros(1))
    base_a = rows.place(a, mx.ones((5, 4)))
    rows.place(b, mx.ones((3, 4)))
    assert rows.serial(a) == base_a   # 8 rows written: a is in the newer half
    rows.place(ImageSpan(start=0, length=1, digest="c", pixels=np.zeros(1)), mx.ones((1, 4)))
    assert rows.serial(a) is None     # 9 written: a's rows are in the older half
    assert rows.place(a, mx.ones((5, 4))) == 9


def test_an_image_prompt_batched_with_a_text_prompt(loaded):
    """Through the engine's BatchGenerator, an image prompt and a text prompt prefilled and
    decoded together each give their greedy tokens alone."""
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    lm, tokenizer, vision = loaded
    tokens, spans = image_prompt(tokenizer, seed=3)
    image = vision.place(tokens, spans)
    text = tokenizer.encode("USER: hello there\nASSISTANT:", add_special_tokens=False)
    greedy = make_sampler(temp=0.0)

    def generate(prompts):
        gen = BatchGenerator(lm, stop_tokens=[], completion_batch_size=4,
                             prefill_batch_size=4)
        uids = gen.insert(prompts, [6] * len(prompts), samplers=[greedy] * len(prompts))
        out = {u: [] for u in uids}
        while any(len(v) < 6 for v in out.values()):
            _, responses = gen.next()
            for r in responses:
                out[r.uid].append(r.token)
        gen.close()
        return [out[u] for u in uids]

    together = generate([image, text])
    assert together == [generate([image])[0], generate([text])[0]]


def test_logits_processors_see_the_image_token_not_virtual_ids(loaded):
    """A processor over the context (mlx-lm's repetition penalty indexes logits by it) gets
    the image token where the prompt holds virtual ids, and every other token unchanged."""
    _, tokenizer, vision = loaded
    tokens, spans = image_prompt(tokenizer, seed=5)
    placed = vision.place(tokens, spans)
    seen = []
    process = vision.text_context(lambda context, logits: seen.append(context) or logits)
    logits = mx.zeros((1, vision.rows.first))
    assert process(mx.array(placed), logits) is logits
    assert seen[0].tolist() == tokens
    assert max(placed) >= vision.rows.first


def test_detail_low_shrinks_the_image_before_the_processor(loaded):
    """`detail: low` starts the processor from at most 512 x 512 pixels: LLaVA's one
    resolution gives the same token count, from other pixels (another content key)."""
    _, tokenizer, _ = loaded
    prompter = prompter_of(tokenizer)
    url = data_url(image_bytes(900, 700, seed=6), "image/png")
    tokens = tokenizer.encode("USER: <image>\nhi\nASSISTANT:", add_special_tokens=False)
    _, [auto] = prompter.expand(tokens, [{"image_url": url, "detail": "auto"}])
    _, [high] = prompter.expand(tokens, [{"image_url": url, "detail": "high"}])
    _, [low] = prompter.expand(tokens, [{"image_url": url, "detail": "low"}])
    assert auto.length == low.length == vlm.IMAGE_TOKENS
    assert auto.digest == high.digest != low.digest


def test_a_vision_architecture_not_served_is_refused_at_startup(tmp_path):
    """A vision config of an architecture the batched text model cannot compute (M-RoPE
    Qwen2-VL) is a SettingsError naming --model, before anything loads."""
    import json

    from triode.errors import SettingsError
    from triode.model.loading import check_model

    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "qwen2_vl", "vision_config": {}, "text_config": {}}))
    with pytest.raises(SettingsError, match="--model.*'qwen2_vl'.*llava"):
        check_model(str(tmp_path))


def test_a_vision_model_without_mlx_vlm_installed_is_a_startup_error(tmp_path, monkeypatch):
    """mlx-vlm is the `vision` extra: without it a LLaVA directory is a one-line
    SettingsError naming --model and the extra, not an ImportError mid-load."""
    import importlib.util
    import json

    from triode.errors import SettingsError
    from triode.model.loading import check_model

    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "llava", "vision_config": {}, "text_config": {}}))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlx_vlm" else real(name, *a))
    with pytest.raises(SettingsError, match=r"--model.*mlx-vlm.*triode\[vision\]"):
        check_model(str(tmp_path))


def test_a_request_s_image_tokens_are_limited_exactly(loaded, monkeypatch):
    """Image tokens exactly at the per-request limit render; one image more is a 400."""
    from triode.errors import InvalidRequest
    from triode.model import vision as module

    monkeypatch.setattr(module, "REQUEST_IMAGE_ROWS", 2 * vlm.IMAGE_TOKENS)
    _, tokenizer, _ = loaded
    prompter = prompter_of(tokenizer)
    image = {"image_url": data_url(image_bytes(20, 20, seed=7), "image/png")}

    def expand(n):
        text = "USER: " + "<image>\n" * n + "hi\nASSISTANT:"
        return prompter.expand(tokenizer.encode(text, add_special_tokens=False), [image] * n)

    assert len(expand(2)[1]) == 2
    with pytest.raises(InvalidRequest, match="32 fit in one request"):
        expand(3)
