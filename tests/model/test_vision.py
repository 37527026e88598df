"""A vision model served as text model + image rows (model/vision.py), on each fixture
vision model (LLaVA-1.5, tests/fixtures/vlm.py; Gemma 3, tests/fixtures/gemma3_vlm.py;
Idefics3, tests/fixtures/idefics3_vlm.py; Qwen2-VL, Qwen2.5-VL and Qwen3-VL with their M-RoPE
positions, tests/fixtures/qwen_vl.py and model/mrope.py): an
image is the run of tokens mlx-vlm's processor makes of it, the rebuilt mlx-lm language
model with an image's rows computes mlx-vlm's own logits, images are keyed by content, and
batched prefill of an image prompt beside a text prompt gives each its own unbatched
result."""

from __future__ import annotations

import functools
import types

import pytest

mx = pytest.importorskip("mlx.core")

from ..fixtures import gemma3_vlm, idefics3_vlm, mistral3_vlm, qwen_vl, vlm  # noqa: E402
from ..fixtures.media import data_url, image_bytes  # noqa: E402
from triode.model.vision import (ImageRows, VisionPrompter, load_vision,  # noqa: E402
                                 prompter_of)


def llava_logits(model, ids, spans):
    """mlx-vlm's LLaVA forward pass (its generation's, with the processor's pixels)."""
    return model(ids, pixels_of(spans), mask=None).logits


def pixels_of(spans):
    import numpy as np

    return mx.array(np.concatenate([s.pixels for s in spans]))


def gemma3_logits(model, ids, spans):
    """mlx-vlm's Gemma 3 generation: get_input_embeddings with the processor's attention
    mask, then the language model over those embeddings with its own caches and no mask
    (its causal sliding-window and global masks), as mlx_vlm.generate's prefill does.
    (`Model.__call__` passes get_input_embeddings' 4-D mask instead, which masks nothing:
    not what generation computes.)"""
    embedded = model.get_input_embeddings(ids, pixels_of(spans), mask=mx.ones(ids.shape))
    return model.language_model(ids, inputs_embeds=embedded.inputs_embeds,
                                cache=model.language_model.make_cache()).logits


def idefics3_logits(model, ids, spans):
    """mlx-vlm's Idefics3 (SmolVLM) generation: get_input_embeddings (the vision tower, the
    pixel-shuffle connector, the features at the image tokens), then the language model
    over those embeddings with its causal mask."""
    embedded = model.get_input_embeddings(ids, pixels_of(spans))
    return model.language_model(ids, inputs_embeds=embedded.inputs_embeds).logits


def qwen_logits(model, ids, spans):
    """mlx-vlm's Qwen2-VL / Qwen2.5-VL / Qwen3-VL forward pass: the vision tower over every
    image's patches with their grids, the features at the image tokens (Qwen3-VL's deepstack
    features added after its first layers), the language model with the M-RoPE positions its
    get_rope_index computes from the grids."""
    grid = mx.array([s.grid for s in spans])
    return model(ids, pixels_of(spans), image_grid_thw=grid).logits


def qwen_fixture(kind):
    """tests/fixtures/qwen_vl.py for one kind, as the other fixtures' modules look: an
    image's tokens depend on its size."""
    return types.SimpleNamespace(build=functools.partial(qwen_vl.build, kind=kind),
                                 IMAGE_TOKENS=qwen_vl.image_tokens(70, 50),
                                 tokens_of=qwen_vl.image_tokens)


def pixtral_logits(model, ids, spans):
    """mlx-vlm's Pixtral / Mistral 3 forward pass: the vision tower over the image at its
    size, the projector (Mistral 3's merges 2 x 2 patches), the features at the `[IMG]`
    tokens (the row breaks stay text)."""
    sizes = mx.array([s.sizes[0][1] for s in spans])
    return model(ids, pixels_of(spans), mask=None, image_sizes=sizes).logits


def pixtral_fixture(kind):
    """tests/fixtures/mistral3_vlm.py for one kind: an image's tokens depend on its size,
    and its run holds a row break after each row but the last."""
    def run_length(width, height):
        rows, columns = mistral3_vlm.image_rows(width, height, kind)
        return rows * (columns + 1) - 1

    return types.SimpleNamespace(
        build=functools.partial(mistral3_vlm.build, kind=kind),
        IMAGE_TOKENS=mistral3_vlm.image_tokens(70, 50, kind),
        tokens_of=functools.partial(mistral3_vlm.image_tokens, kind=kind),
        run_length=run_length)


FAMILIES = {"llava": (vlm, llava_logits), "gemma3": (gemma3_vlm, gemma3_logits),
            "idefics3": (idefics3_vlm, idefics3_logits),
            "qwen2_vl": (qwen_fixture("qwen2_vl"), qwen_logits),
            "qwen2_5_vl": (qwen_fixture("qwen2_5_vl"), qwen_logits),
            "qwen3_vl": (qwen_fixture("qwen3_vl"), qwen_logits),
            "mistral3": (pixtral_fixture("mistral3"), pixtral_logits),
            "pixtral": (pixtral_fixture("pixtral"), pixtral_logits)}


def tokens_in_run(tokens, span, vision):
    """The image tokens of an image's run."""
    return [t for t in tokens[span.start:span.start + span.length]
            if t == vision.image_token_id]


def tokens_of(fixture, width, height):
    """The image tokens of an image of this size: the fixture's one count unless its
    processor sizes images by their own size (Qwen-VL)."""
    count = getattr(fixture, "tokens_of", None)
    return fixture.IMAGE_TOKENS if count is None else count(width, height)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def loaded(family, tmp_path_factory):
    fixture, _ = FAMILIES[family]
    return load_vision(str(fixture.build(tmp_path_factory.mktemp(family))))


@pytest.fixture(scope="module")
def fixture(family):
    return FAMILIES[family][0]


def render(tokenizer, images: int = 1, text: str = "What is it?") -> str:
    """The model's chat template over one user message: `images` images, then `text`."""
    content = [{"type": "image"}] * images + [{"type": "text", "text": text}]
    out: str = tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                             add_generation_prompt=True, tokenize=False)
    return out


def image_part(seed: int = 0, detail: str = "auto", width: int = 70, height: int = 50):
    return {"type": "image", "image_url": data_url(image_bytes(width, height, seed=seed),
                                                   "image/png"), "detail": detail}


def image_prompt(tokenizer, seed: int = 0, detail: str = "auto"):
    prompter = prompter_of(tokenizer)
    text = render(tokenizer)
    tokens = tokenizer.encode(text, add_special_tokens=False)
    return prompter.expand(tokens, [image_part(seed, detail)], text)


def test_an_image_is_a_run_of_its_tokens(loaded, fixture):
    """One image in the template becomes the processor's image tokens (LLaVA: 4 x 4
    patches; Gemma 3: mm_tokens_per_image; Qwen-VL: its size over 8 x 8 pixels), one run;
    Pixtral's and Mistral 3's run holds a row break after each row but the last."""
    _, tokenizer, vision = loaded
    tokens, [span] = image_prompt(tokenizer)
    run = tokens[span.start:span.start + span.length]
    image = vision.image_token_id
    assert run.count(image) == tokens.count(image) == fixture.IMAGE_TOKENS
    assert run[0] == run[-1] == image
    run_length = getattr(fixture, "run_length", None)
    if run_length is None:
        assert run == [image] * fixture.IMAGE_TOKENS
        return
    rows, columns = mistral3_vlm.image_rows(70, 50, "pixtral" if fixture.IMAGE_TOKENS > 100
                                            else "mistral3")
    assert span.length == run_length(70, 50)
    breaks = tokenizer.convert_tokens_to_ids("[IMG_BREAK]")
    assert run == ([image] * columns + [breaks]) * (rows - 1) + [image] * columns
    assert tokens[span.start + span.length] == tokenizer.convert_tokens_to_ids("[IMG_END]")


def span_shape(span):
    return span.pixels.shape[-3:]


def test_images_are_tokenized_as_mlx_vlm_s_processor_does(loaded):
    """Two images of other sizes: the prompt's tokens are those mlx-vlm's processor makes
    of the rendered text and the images, and each image's pixels are the processor's."""
    import io

    import numpy as np
    from PIL import Image

    _, tokenizer, _ = loaded
    prompter = prompter_of(tokenizer)
    text = render(tokenizer, images=2)
    sizes = [(70, 50), (30, 90)]
    parts = [image_part(seed=8 + i, width=w, height=h) for i, (w, h) in enumerate(sizes)]
    tokens, spans = prompter.expand(tokenizer.encode(text, add_special_tokens=False),
                                    parts, text)
    images = [Image.open(io.BytesIO(image_bytes(w, h, seed=8 + i))).convert("RGB")
              for i, (w, h) in enumerate(sizes)]
    theirs = prompter.processor(text=text, images=images)
    assert tokens == np.array(theirs["input_ids"])[0].tolist()
    assert len(spans) == 2 and spans[0].start + spans[0].length < spans[1].start
    if spans[0].grid is not None:   # Qwen-VL: every image's patches in a row, and the grids
        assert np.array_equal(np.concatenate([s.pixels for s in spans]),
                              np.array(theirs["pixel_values"]))
        assert [list(s.grid) for s in spans] == np.array(theirs["image_grid_thw"]).tolist()
        assert spans[0].length != spans[1].length   # sized by each image's own size
        return
    if dict(spans[0].sizes).get("image_sizes"):   # Pixtral: padded to the largest, cropped
        for i, span in enumerate(spans):
            height, width = span.sizes[0][1]
            assert list(span.sizes[0][1]) == list(np.array(theirs["image_sizes"])[i])
            assert np.array_equal(span.pixels[0],
                                  np.array(theirs["pixel_values"])[i, :, :height, :width])
        return
    # One image per entry ([images, C, H, W]; Idefics3's processor adds a batch axis).
    pixels = np.array(theirs["pixel_values"]).reshape(-1, *span_shape(spans[0]))
    for i, span in enumerate(spans):
        assert np.array_equal(span.pixels.reshape(span_shape(span)), pixels[i])


def test_a_gemma3_image_is_its_soft_tokens_between_its_markers(tmp_path_factory):
    """Gemma 3's `<start_of_image>` becomes a blank line, `<start_of_image>`, the
    `<image_soft_token>`s, `<end_of_image>` and a blank line, the newlines tokenized with
    the template's own beside them (the fixture's vocabulary, like Gemma's, merges runs of
    newlines); only the soft tokens are the image's rows."""
    _, tokenizer, vision = load_vision(str(gemma3_vlm.build(
        tmp_path_factory.mktemp("gemma3-markers"))))
    tokens, [span] = image_prompt(tokenizer)
    ids = tokenizer.convert_tokens_to_ids
    start, end = span.start, span.start + span.length
    assert vision.image_token_id == ids("<image_soft_token>")
    assert tokens[start - 1] == ids("<start_of_image>") and tokens[end] == ids("<end_of_image>")
    assert tokens.count(ids("<start_of_image>")) == tokens.count(ids("<end_of_image>")) == 1
    assert tokenizer.decode(tokens[:start - 1]).endswith("<start_of_turn>user\n\n\n")
    assert tokenizer.decode(tokens[end + 1:]).startswith("\n\nWhat is it?<end_of_turn>")
    newlines = tokenizer.encode("\n\n", add_special_tokens=False)
    assert len(newlines) == 1 and tokens[start - 3:start - 1] == \
        tokenizer.encode("\n\n\n", add_special_tokens=False) != [ids("\u010a")] + newlines


def test_a_prompt_whose_text_holds_image_tokens_is_refused(loaded):
    """Image tokens the input's text holds itself would be taken for an image's rows: the
    request is a 400 (LLaVA: one `<image>` too many for its images; Gemma 3: soft tokens
    outside the image's run)."""
    from triode.errors import InvalidRequest

    _, tokenizer, vision = loaded
    prompter = prompter_of(tokenizer)
    text = render(tokenizer, text=f"What is {vision.prompter.image_token}?")
    with pytest.raises(InvalidRequest, match="image token"):
        prompter.expand(tokenizer.encode(text, add_special_tokens=False), [image_part()],
                        text)


def test_image_rows_give_mlx_vlm_s_own_logits(loaded, family):
    """The mlx-lm language model over the prompt with virtual ids computes what mlx-vlm's
    own generation computes from the image tokens and pixels; another image gives other
    logits (the image's features matter, not only its tokens)."""
    lm, tokenizer, vision = loaded
    reference = FAMILIES[family][1]
    tokens, spans = image_prompt(tokenizer)
    ours = lm(mx.array([vision.place(tokens, spans)]))
    theirs = reference(vision.model, mx.array([tokens]), spans)
    assert mx.allclose(ours, theirs, atol=1e-4).item()
    assert not mx.allclose(ours, lm(mx.array([tokens])), atol=1e-2).item()  # the image matters
    other_tokens, other = image_prompt(tokenizer, seed=4)
    assert other_tokens == tokens
    assert not mx.allclose(ours, lm(mx.array([vision.place(tokens, other)])), atol=1e-2).item()


def test_a_quantized_gemma3_gives_mlx_vlm_s_own_logits(tmp_path_factory):
    """Gemma 3 quantized by mlx-vlm's converter (4 bits; its tied output layer and its
    embedding quantized too): the rebuilt model, its embedding a quantized one with image
    rows, still computes mlx-vlm's own logits."""
    from mlx_vlm.convert import convert

    source = gemma3_vlm.build(tmp_path_factory.mktemp("gemma3-source"))
    target = tmp_path_factory.mktemp("gemma3-q4") / "model"
    convert(str(source), str(target), quantize=True, q_bits=4, q_group_size=32)
    lm, tokenizer, vision = load_vision(str(target))
    assert type(lm.lm_head).__name__ == "QuantizedLinear"
    assert type(lm.model.embed_tokens).__name__ == "ImageQuantizedEmbedding"
    tokens, spans = image_prompt(tokenizer)
    ours = lm(mx.array([vision.place(tokens, spans)]))
    theirs = gemma3_logits(vision.model, mx.array([tokens]), spans)
    assert mx.allclose(ours, theirs, atol=1e-4).item()


def test_gemma3_rows_are_its_features_over_sqrt_hidden(tmp_path_factory):
    """Gemma 3's rows are the projector's features divided by sqrt(hidden): mlx-lm's
    gemma3_text multiplies every embedding (rows included) by sqrt(hidden) after the
    lookup, as mlx-vlm's language model does with its input embeddings."""
    _, tokenizer, vision = load_vision(str(gemma3_vlm.build(
        tmp_path_factory.mktemp("gemma3-scale"))))
    tokens, [span] = image_prompt(tokenizer)
    placed = vision.place(tokens, [span])
    model = vision.model
    hidden, _, _ = model.vision_tower(mx.array(span.pixels).transpose(0, 2, 3, 1),
                                      output_hidden_states=True)
    features = model.multi_modal_projector(hidden)[0]
    serials = mx.array(placed[span.start:span.start + span.length]) - vision.rows.first
    rows = vision.rows.table[serials % vision.rows.capacity]
    width = gemma3_vlm.TEXT["hidden_size"]
    assert mx.allclose(rows, features / width ** 0.5, atol=1e-6).item()
    assert mx.abs(features).max().item() > 0.1   # not a projection that sums to nothing


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

    def rows(placed):   # the run's virtual ids (Pixtral's row breaks stay text)
        return {t for t in placed[s.start:s.start + s.length] if t >= vision.rows.first}
    assert len(rows(first)) == len(rows(other)) == len(tokens_in_run(tokens, s, vision))
    assert rows(other).isdisjoint(rows(first))


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
    text = tokenizer.encode(tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello there"}], add_generation_prompt=True,
        tokenize=False), add_special_tokens=False)
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


def test_detail_low_shrinks_the_image_before_the_processor(loaded, fixture):
    """`detail: low` starts the processor from at most 512 x 512 pixels: LLaVA's and
    Gemma 3's one resolution gives the same token count, from other pixels (another content
    key); the Qwen fixture's `max_pixels` (64 x 64) is below that, so it sizes both alike."""
    _, tokenizer, vision = loaded
    prompter = prompter_of(tokenizer)
    url = data_url(image_bytes(900, 700, seed=6), "image/png")
    text = render(tokenizer, text="hi")
    tokens = tokenizer.encode(text, add_special_tokens=False)

    def expand(detail):
        expanded, [span] = prompter.expand(tokens, [{"image_url": url, "detail": detail}],
                                           text)
        return span, len(tokens_in_run(expanded, span, vision))
    (auto, n_auto), (high, _), (low, n_low) = expand("auto"), expand("high"), expand("low")
    assert n_auto == n_low == tokens_of(fixture, 900, 700)
    assert auto.digest == high.digest != low.digest


def test_a_vision_architecture_not_served_is_refused_at_startup(tmp_path):
    """A vision config of an architecture triode does not serve (GLM-4V, whose language
    model mlx-vlm serves) is a SettingsError naming --model, before anything loads."""
    import json

    from triode.errors import SettingsError
    from triode.model.loading import check_model

    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "glm4v", "vision_config": {}, "text_config": {}}))
    with pytest.raises(SettingsError, match="--model.*'glm4v'.*llava, gemma3"):
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


def test_a_request_s_image_tokens_are_limited_exactly(loaded, fixture, monkeypatch):
    """Image tokens exactly at the per-request limit render; one image more is a 400."""
    from triode.errors import InvalidRequest
    from triode.model import vision as module

    each = tokens_of(fixture, 20, 20)
    monkeypatch.setattr(module, "REQUEST_IMAGE_ROWS", 2 * each)
    _, tokenizer, _ = loaded
    prompter = prompter_of(tokenizer)
    image = {"image_url": data_url(image_bytes(20, 20, seed=7), "image/png")}

    def expand(n):
        text = render(tokenizer, images=n, text="hi")
        return prompter.expand(tokenizer.encode(text, add_special_tokens=False), [image] * n,
                               text)

    assert len(expand(2)[1]) == 2
    with pytest.raises(InvalidRequest, match=f"{2 * each} fit in one request"):
        expand(3)


def test_a_gemma3_whose_processor_and_model_disagree_on_image_tokens_is_refused(
        tmp_path_factory):
    """A Gemma 3 directory whose processor would write another number of soft tokens than
    the projector gives rows is a SettingsError naming --model, at load."""
    import json

    from triode.errors import SettingsError

    directory = gemma3_vlm.build(tmp_path_factory.mktemp("gemma3-mismatch"))
    path = directory / "processor_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()),
                                "image_seq_length": 2 * gemma3_vlm.IMAGE_TOKENS}))
    with pytest.raises(SettingsError, match=r"--model.*image_seq_length \(32\).*\(16\)"):
        load_vision(str(directory))


def test_an_image_is_processed_once_however_often_it_is_rendered(loaded, monkeypatch):
    """A chain's continuations render its images again: the prompter decodes and processes
    each image once (its processed pixels are kept), and another image, or the same one at
    another `detail`, is processed anew."""
    _, tokenizer, _ = loaded
    processed: list[str] = []
    pixels = VisionPrompter.pixels

    def counted(prompter, image, shrink=1.0):
        processed.append(image["detail"])
        return pixels(prompter, image, shrink)
    monkeypatch.setattr(VisionPrompter, "pixels", counted)
    _, [first] = image_prompt(tokenizer, seed=13)
    _, [again] = image_prompt(tokenizer, seed=13)
    assert processed == ["auto"]
    assert again.digest == first.digest and again.pixels is first.pixels
    image_prompt(tokenizer, seed=14)
    image_prompt(tokenizer, seed=13, detail="low")
    assert processed == ["auto", "auto", "low"]


@pytest.mark.parametrize("kind", mistral3_vlm.KINDS)
def test_pixtral_images_of_other_sizes_give_mlx_vlm_s_logits(kind, tmp_path_factory):
    """Two images of other sizes in one Pixtral / Mistral 3 prompt: the tokens are mlx-vlm's
    processor's, and the logits those of mlx-vlm's model over its processor's own inputs (the
    images padded to the larger, with their sizes), where triode ran each image alone."""
    import io

    import numpy as np
    from PIL import Image

    lm, tokenizer, vision = load_vision(str(mistral3_vlm.build(
        tmp_path_factory.mktemp(kind), kind)))
    prompter = prompter_of(tokenizer)
    text = render(tokenizer, images=2, text="Compare them.")
    sizes = [(70, 50), (30, 90)]
    tokens, spans = prompter.expand(
        tokenizer.encode(text, add_special_tokens=False),
        [image_part(seed=20 + i, width=w, height=h) for i, (w, h) in enumerate(sizes)], text)
    images = [Image.open(io.BytesIO(image_bytes(w, h, seed=20 + i))).convert("RGB")
              for i, (w, h) in enumerate(sizes)]
    theirs_inputs = prompter.processor(text=text, images=images)
    assert tokens == np.array(theirs_inputs["input_ids"])[0].tolist()
    theirs = vision.model(mx.array([tokens]), mx.array(theirs_inputs["pixel_values"]),
                          mask=None, image_sizes=mx.array(theirs_inputs["image_sizes"])).logits
    ours = lm(mx.array([vision.place(tokens, spans)]))
    assert mx.allclose(ours, theirs, atol=1e-4).item()
    assert not mx.allclose(ours, lm(mx.array([tokens])), atol=1e-2).item()


def test_a_qwen_image_larger_than_a_request_holds_is_shrunk_to_fit(tmp_path_factory,
                                                                  monkeypatch):
    """Qwen-VL at a processor `max_pixels` of 1024 x 1024 (the fixture's tokens are 8 x 8
    pixels): a 900 x 700 image would be 9,856 tokens, more than one request holds, so it is
    shrunk, its aspect kept, to at most the limit (and not far below it) instead of a 400.
    Under a larger limit it is its processor's own size, and `detail: low` (from 512 x 512
    pixels) fewer tokens."""
    from triode.model import vision as module

    _, tokenizer, vision = load_vision(str(qwen_vl.build(
        tmp_path_factory.mktemp("qwen-large"), max_pixels=1024 * 1024)))
    prompter = prompter_of(tokenizer)
    url = data_url(image_bytes(900, 700, seed=6), "image/png")
    text = render(tokenizer, text="hi")
    tokens = tokenizer.encode(text, add_special_tokens=False)

    def image_tokens(detail):
        _, [span] = prompter.expand(tokens, [{"image_url": url, "detail": detail}], text)
        _, h, w = span.grid
        return span.length, w / h

    limit = module.REQUEST_IMAGE_ROWS
    auto, aspect = image_tokens("auto")
    assert 0.85 * limit <= auto <= limit and abs(aspect - 900 / 700) < 0.1
    monkeypatch.setattr(module, "REQUEST_IMAGE_ROWS", 20000)
    prompter._processed.clear()
    native = prompter.processor.image_processor.num_image_tokens(700, 900)
    assert image_tokens("auto")[0] == native > limit
    low, _ = image_tokens("low")
    assert low <= (512 * 512) // 64 < native


def test_a_mistral3_with_another_language_model_is_refused(tmp_path_factory):
    """A Pixtral tower over a language model triode does not rebuild (here one that says it
    is Gemma) is a SettingsError naming --model and the type, at load."""
    import json

    from triode.errors import SettingsError

    directory = mistral3_vlm.build(tmp_path_factory.mktemp("mistral3-other"))
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config["text_config"]["model_type"] = "gemma"
    path.write_text(json.dumps(config))
    with pytest.raises(SettingsError, match=r"--model.*of type 'gemma'.*Pixtral"):
        load_vision(str(directory))


def test_a_pixtral_tower_in_llava_s_layout_is_refused(tmp_path):
    """A config.json that says `llava` over a Pixtral vision tower (Hugging Face's Pixtral
    layout) would have its images tokenized as LLaVA-1.5's, without row breaks: refused at
    startup, naming --model and the served layout."""
    import json

    from triode.errors import SettingsError
    from triode.model.loading import check_model

    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "llava", "vision_config": {"model_type": "pixtral"},
         "text_config": {}}))
    with pytest.raises(SettingsError, match=r"--model.*Pixtral.*LLaVA's layout.*'pixtral'"):
        check_model(str(tmp_path))
