"""Vision-language models through mlx-vlm, served by the same batched engine as text.

A model whose config.json has a `vision_config` and an architecture listed here is loaded
with mlx-vlm (its vision tower, projector and processor), and its language model is rebuilt
as mlx-lm's own class over the same weight arrays (no copy), so text requests, batching, the
prompt cache, speculative decoding and KV quantization work on it exactly as on a text model.

Images reach the language model as *image rows*. The trio side renders a prompt with one run
of the model's image token per image (as many tokens as the processor gives the image) and
carries each image's processed pixels with it (`ImageSpan`). At insert, the engine thread
runs the vision tower on an image it has not seen (or whose rows were overwritten), writes its
features into a ring of rows (`ImageRows`), and replaces the image's tokens in the prompt by
*virtual ids* past the vocabulary, one per row; the embedding layer looks ids past the
vocabulary up in the ring instead of its table. A virtual id names one row of one image's
content (its processed pixels' digest), never reused for other content, so the prompt cache,
keyed by token ids, reuses a prefix holding an image exactly when the image is the same, and
batched prefills and decode steps of any mix of requests need nothing special
(docs/media.md).

Only architectures whose language model places image features at the image tokens' positions
and attends with the causal masks of its text are listed (`ARCHITECTURES`, one small
description each: how the template's image marker expands, how many tokens an image is, how
mlx-vlm's text config reads as mlx-lm's): there the rebuilt mlx-lm model computes what
mlx-vlm's own generation does (tests/model/test_vision.py compares them). Positions are plain
1-D, or Qwen-VL's multimodal rotary positions, computed from the image rows' grid by
model/mrope.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import secrets
import threading
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

import attrs

from ..errors import InvalidRequest, SettingsError
from . import cpu_attention
from .decoding import DETAIL_PIXELS, parse_data_url
from .request import ImageSpan

# Rows of image features the engine keeps (a ring): each image uses as many as it has tokens
# (576 for LLaVA-1.5 at 336 px). 16384 rows of a 4096-wide bf16 model is 128 MiB.
IMAGE_ROWS = 16384
# The image tokens one request may hold: an eighth of the ring, so the rows of a prompt being
# prefilled are overwritten only after more than 3 more such requests' worth of new images
# were placed meanwhile (the reuse rule below keeps half the ring as headroom).
REQUEST_IMAGE_ROWS = IMAGE_ROWS // 8
# Images reach rendering checked (service/media.py, --media-max-bytes); stored ones replayed
# by a chain were checked when they came in.
MAX_DATA_URL_BYTES = 1 << 31
# Images whose processed pixels a prompter keeps (least recently used first out): a chain's
# every continuation, and every step of `truncation: auto`, renders the same images again.
PROCESSED_IMAGES = 32


def vision_config(model: str) -> dict[str, Any] | None:
    """The model's config.json when it describes a vision-language model, else None (a
    local directory only; a Hugging Face repo id is looked up in the local cache)."""
    path = Path(model)
    if not path.is_dir():
        try:
            from mlx_lm import utils

            lookup: Any = utils.hf_repo_to_path   # the local cache only
            path = Path(lookup(model))
        except Exception:
            return None
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or "vision_config" not in config:
        return None
    return config


@attrs.frozen
class ImageFormat:
    """How one model's prompt holds an image. The chat template renders `marker` where an
    image goes; the processor widens it into `before`, `count(image)` image tokens (one per
    feature row: the tokens replaced by virtual ids) and `after`, or into `run(image)`
    (image tokens with other tokens between them: Pixtral's row breaks)."""

    marker: str
    image_token: str
    image_token_id: int
    count: Callable[["Processed"], int] = attrs.field(eq=False, repr=False)
    before: str = ""
    after: str = ""
    run: Callable[["Processed"], str] | None = attrs.field(default=None, eq=False,
                                                           repr=False)

    @property
    def in_context(self) -> bool:
        """The expansion has text of its own, which the tokenizer may merge with the text
        beside it (Gemma 3's blank lines): it is tokenized within the rendered text."""
        return bool(self.before or self.after or self.run)

    def text(self, image: "Processed") -> str:
        """An image's expansion, as text."""
        if self.run is not None:
            return self.run(image)
        return self.before + self.image_token * self.count(image) + self.after


@attrs.frozen
class Architecture:
    """What one served vision architecture differs in (the rest is shared)."""

    # The image format, from mlx-vlm's processor and config.json.
    image_format: Callable[[Any, dict[str, Any]], ImageFormat]
    # mlx-vlm's text config (as a dict) → mlx-lm's model args for the same language model.
    text_args: Callable[[dict[str, Any]], dict[str, Any]] = lambda config: config
    # mlx-vlm's processor → what is passed to its image processor for each image.
    processor_kwargs: Callable[[Any], dict[str, Any]] = lambda processor: {}
    # mlx-vlm's name of a language-model weight → mlx-lm's name of the same weight.
    weight_name: Callable[[str], str] = lambda name: name
    # Image tokens have grid positions (M-RoPE, model/mrope.py): the processor gives each
    # image a grid, and rows of `merge` x `merge` patches are one token.
    mrope: bool = False


def _llava_format(processor: Any, config: dict[str, Any]) -> ImageFormat:
    """LLaVA-1.5: `<image>` becomes one `<image>` per patch of the processed image, plus
    `num_additional_image_tokens` (the CLS feature), minus one for the `default` feature
    strategy (which drops it)."""
    token = processor.image_token
    extra = int(getattr(processor, "num_additional_image_tokens", 0) or 0) - \
        int(getattr(processor, "vision_feature_select_strategy", None) == "default")

    def count(image: Processed) -> int:
        patch = processor.patch_size
        height, width = int(image.pixels.shape[-2]), int(image.pixels.shape[-1])
        return int((height // patch) * (width // patch) + extra)

    return ImageFormat(token, token, int(config.get("image_token_index",
                                                    processor.image_token_id)), count)


def _gemma3_format(processor: Any, config: dict[str, Any]) -> ImageFormat:
    """Gemma 3: `<start_of_image>` becomes `\\n\\n<start_of_image>`, `mm_tokens_per_image`
    `<image_soft_token>`s (the vision tower's patches average-pooled to that many, whatever
    the image) and `<end_of_image>\\n\\n`, as mlx-vlm's Gemma3Processor writes it."""
    # mlx-vlm's projector pools to its text config's count (256 when it has none).
    n = int((config.get("text_config") or {}).get("mm_tokens_per_image", 256))
    for name, other in (("config.json's mm_tokens_per_image",
                         config.get("mm_tokens_per_image", n)),
                        ("the processor's image_seq_length", processor.image_seq_length)):
        if int(other) != n:
            raise SettingsError(f"{name} ({other}) is not the language model's "
                                f"mm_tokens_per_image ({n})")
    return ImageFormat(processor.boi_token, processor.image_token,
                       int(config.get("image_token_index", processor.image_token_id)),
                       lambda image: n, before=f"\n\n{processor.boi_token}",
                       after=f"{processor.tokenizer.eoi_token}\n\n")


def _gemma3_text_args(config: dict[str, Any]) -> dict[str, Any]:
    """mlx-vlm's gemma3 language model is mlx-lm's gemma3_text (the same layers, sliding-
    window and global; embeddings times sqrt(hidden)) with other names: its global layers'
    RoPE base is `rope_global_base_freq`, mlx-lm's `rope_theta`."""
    if config.get("rope_traditional"):
        raise SettingsError("a Gemma 3 language model with traditional RoPE, which mlx-lm's "
                            "gemma3_text does not compute")
    return {**config, "model_type": "gemma3_text",
            "rope_theta": config.get("rope_global_base_freq", 1_000_000.0)}


def _idefics3_format(processor: Any, config: dict[str, Any]) -> ImageFormat:
    """Idefics3 (SmolVLM), one view per image (image splitting off): `<image>` becomes
    `<fake_token_around_image><global-img>`, `image_seq_len` `<image>`s (the vision tower's
    patches pixel-shuffled by `scale_factor`) and `<fake_token_around_image>`, as mlx-vlm's
    Idefics3Processor writes a single image."""
    def text(token: Any) -> str:
        return str(getattr(token, "content", token))

    token, fake = text(processor.image_token), text(processor.fake_image_token)
    n = int(processor.image_seq_len)
    return ImageFormat(token, token, int(config.get("image_token_id",
                                                    processor.image_token_id)),
                       lambda image: n, before=fake + text(processor.global_image_tag),
                       after=fake)


def _idefics3_weight(name: str) -> str:
    """mlx-vlm's Idefics3 language model holds its layers at its top; mlx-lm's Llama under
    `model.`, beside its `lm_head`."""
    return name if name.startswith("lm_head.") else f"model.{name}"


def _qwen_format(processor: Any, config: dict[str, Any]) -> ImageFormat:
    """Qwen2-VL, Qwen2.5-VL and Qwen3-VL: the template's
    `<|vision_start|><|image_pad|><|vision_end|>` keeps its markers; `<|image_pad|>` becomes one per `merge` x `merge` patches of the
    image as the processor resized it (to multiples of patch x merge pixels, within
    `min_pixels` and `max_pixels`), as mlx-vlm's Qwen2VLProcessor writes it."""
    token = processor.image_token
    merge = int(processor.image_processor.merge_size)

    def count(image: Processed) -> int:
        t, h, w = image.size("image_grid_thw")
        return int(t * h * w) // merge ** 2

    return ImageFormat(token, token, int(config.get("image_token_id",
                                                    processor.image_token_id)), count)


def _qwen2_text_args(config: dict[str, Any]) -> dict[str, Any]:
    """Qwen2-VL's language model is mlx-lm's qwen2 (biased q, k, v projections) but for its
    RoPE, which model/mrope.py replaces: its `rope_scaling` only names the M-RoPE sections."""
    return {**config, "model_type": "qwen2", "rope_scaling": None}


def _qwen3_text_args(config: dict[str, Any]) -> dict[str, Any]:
    """Qwen3-VL's is mlx-lm's qwen3 (q and k norms, its own head_dim), likewise."""
    return {**config, "model_type": "qwen3", "rope_scaling": None}


def _pixtral_format(processor: Any, config: dict[str, Any]) -> ImageFormat:
    """Pixtral and Mistral 3: `[IMG]` becomes the image's rows of `[IMG]` (one per
    `patch_size x spatial_merge_size` pixels of the image as the processor resized it), each
    row but the last followed by `[IMG_BREAK]`, the last by `[IMG_END]`, as mlx-vlm's
    Pixtral and Mistral3 processors write it. Only the `[IMG]`s are feature rows."""
    token = str(processor.image_token)
    step = int(processor.patch_size) * int(processor.spatial_merge_size)

    def grid(image: Processed) -> tuple[int, int]:
        height, width = image.size("image_sizes")
        return height // step, width // step

    def count(image: Processed) -> int:
        rows, columns = grid(image)
        return rows * columns

    def run(image: Processed) -> str:
        rows, columns = grid(image)
        breaks, end = str(processor.image_break_token), str(processor.image_end_token)
        return breaks.join([token * columns] * rows) + end

    return ImageFormat(token, token, int(config.get("image_token_index")
                                         or processor.image_token_id), count, run=run)


def _pixtral_kwargs(processor: Any) -> dict[str, Any]:
    """The processor resizes to whole tokens: its patch size times the merge."""
    return {"patch_size": int(processor.patch_size) * int(processor.spatial_merge_size)}


# The language models (mlx-lm architectures, model_type) served under a Pixtral tower.
PIXTRAL_LANGUAGE_MODELS = frozenset({"mistral", "llama", "ministral3"})


def _mistral_text_args(config: dict[str, Any]) -> dict[str, Any]:
    """The language model of Pixtral and Mistral Small 3.1 is Mistral's (mlx-lm's llama);
    Ministral 3's (`ministral3`, its attention scaled by position) is mlx-lm's own class."""
    if config.get("model_type") not in PIXTRAL_LANGUAGE_MODELS:
        raise SettingsError(f"a language model of type {config.get('model_type')!r}, which "
                            "triode does not serve under a Pixtral vision tower")
    # mlx-vlm's Pixtral always has its own output layer (its text config has no tying)
    return {**config, "tie_word_embeddings": config.get("tie_word_embeddings", False)}


# mlx-vlm architecture (config.json's model_type) → what triode does differently for it.
# Gemma 3's image features reach the language model divided by sqrt(hidden) (mlx-vlm's
# get_input_embeddings), which the language model multiplies back with every embedding:
# the rows hold what get_input_embeddings gives, so no architecture scales anything here.
ARCHITECTURES: dict[str, Architecture] = {
    "llava": Architecture(_llava_format),
    # Pan-and-scan (extra crops of one image, off unless a preprocessor config turns it on)
    # is not served: an image is its one resized view.
    "gemma3": Architecture(_gemma3_format, _gemma3_text_args,
                           lambda processor: {"do_pan_and_scan": False}),
    # SmolVLM. Image splitting (tiles of the image beside its global view, each tile its own
    # run between row and column markers) is not served: an image is its one resized view.
    "idefics3": Architecture(_idefics3_format, lambda config: {**config,
                                                               "tie_word_embeddings": False},
                             lambda processor: {"do_image_splitting": False},
                             _idefics3_weight),
    # Their vision towers differ (Qwen2.5-VL's windowed attention, mlx-vlm computes both);
    # the language models are the same Qwen2 with M-RoPE.
    "qwen2_vl": Architecture(_qwen_format, _qwen2_text_args, mrope=True),
    "qwen2_5_vl": Architecture(_qwen_format, _qwen2_text_args, mrope=True),
    # Qwen3's language model, interleaved M-RoPE sections (mlx-vlm's rotary module computes
    # them) and deepstack features added after its first layers.
    "qwen3_vl": Architecture(_qwen_format, _qwen3_text_args, mrope=True),
    # Mistral Small 3.1 (a Pixtral tower, 2 x 2 patches merged into a token) and Pixtral
    # (one token per patch): image rows broken by [IMG_BREAK], and the images' sizes.
    "mistral3": Architecture(_pixtral_format, _mistral_text_args, _pixtral_kwargs),
    "pixtral": Architecture(_pixtral_format, _mistral_text_args, _pixtral_kwargs),
}
VISION_ARCHITECTURES = tuple(ARCHITECTURES)


def check_vision(config: dict[str, Any], model: str) -> None:
    """A vision model triode cannot serve is a SettingsError naming --model."""
    kind = config.get("model_type")
    if kind not in VISION_ARCHITECTURES:
        raise SettingsError(f"--model: {model}: a vision-language model of architecture "
                            f"{kind!r}, which triode does not serve yet (vision "
                            f"architectures: {', '.join(VISION_ARCHITECTURES)}; "
                            "docs/media.md)")
    tower = (config.get("vision_config") or {}).get("model_type")
    if kind == "llava" and tower == "pixtral":
        raise SettingsError(f"--model: {model}: a Pixtral vision tower in LLaVA's layout "
                            "(config.json's model_type 'llava'), whose images would be "
                            "tokenized as LLaVA-1.5's; triode serves Pixtral as mlx-vlm's "
                            "'pixtral' model_type (docs/media.md)")
    import importlib.util

    if importlib.util.find_spec("mlx_vlm") is None:
        raise SettingsError(f"--model: {model}: a vision-language model needs mlx-vlm, "
                            "which is not installed (pip install 'triode[vision]'; "
                            "docs/media.md)")


# ---- the trio side: prompts with images -------------------------------------------------

@attrs.frozen
class VisionPrompter:
    """What rendering needs of the processor (no MLX): the model's image format and the
    image processor."""

    format: ImageFormat
    processor: Any = attrs.field(eq=False, repr=False)
    processor_kwargs: dict[str, Any] = attrs.field(factory=dict)
    # (the image part's URL and detail, digested) → the image as processed
    _processed: OrderedDict[str, Processed] = attrs.field(
        factory=OrderedDict, eq=False, repr=False, alias="_processed")
    _lock: threading.Lock = attrs.field(factory=threading.Lock, eq=False, repr=False,
                                        alias="_lock")

    @property
    def image_token(self) -> str:
        return self.format.image_token

    def expand(self, tokens: list[int], images: Sequence[dict[str, Any]],
               text: str | None = None) -> tuple[list[int], tuple[ImageSpan, ...]]:
        """`tokens` (the tokenized `text`: one marker where the template put each image)
        with each image's marker widened into its run of image tokens, and the images'
        processed pixels. A format whose expansion has text of its own is tokenized within
        `text`, as the model's processor does it, so `text` is needed then."""
        fmt = self.format
        marker_id = self.processor.tokenizer.convert_tokens_to_ids(fmt.marker) \
            if fmt.marker != fmt.image_token else fmt.image_token_id
        places = [i for i, t in enumerate(tokens) if t == marker_id]
        if len(places) != len(images):
            raise InvalidRequest(f"the chat template placed {len(places)} image tokens for "
                                 f"{len(images)} images", param="input", code="invalid_prompt")
        processed = [self.processed(image) for image in images]
        lengths = [fmt.count(p) for p in processed]
        total = sum(lengths)
        if total > REQUEST_IMAGE_ROWS:
            raise InvalidRequest(f"the input's images are {total} image tokens; at most "
                                 f"{REQUEST_IMAGE_ROWS} fit in one request", param="input")
        if fmt.in_context:
            if text is None:
                raise ValueError(f"{fmt.marker!r} expands within the rendered text")
            out = self._expand_text(text, processed)
        else:
            out = []
            last = 0
            for place, n in zip(places, lengths):
                out.extend(tokens[last:place])
                out.extend([fmt.image_token_id] * n)
                last = place + 1
            out.extend(tokens[last:])
        if out.count(fmt.image_token_id) != total:   # the text held image tokens of its own
            raise InvalidRequest(f"the input's text holds the image token {fmt.image_token!r}",
                                 param="input", code="invalid_prompt")
        places = [i for i, t in enumerate(out) if t == fmt.image_token_id]
        spans: list[ImageSpan] = []
        at = 0
        for p, n in zip(processed, lengths):   # from its first image token to its n-th
            start, end = places[at], places[at + n - 1] + 1
            spans.append(ImageSpan(start=start, length=end - start, digest=p.digest,
                                   pixels=p.pixels, sizes=p.sizes))
            at += n
        return out, tuple(spans)

    def _expand_text(self, text: str, images: list[Processed]) -> list[int]:
        fmt = self.format
        parts = text.split(fmt.marker)
        if len(parts) != len(images) + 1:
            raise InvalidRequest(f"the chat template placed {len(parts) - 1} image markers "
                                 f"for {len(images)} images", param="input",
                                 code="invalid_prompt")
        expanded = parts[0] + "".join(fmt.text(image) + part
                                      for image, part in zip(images, parts[1:]))
        out: list[int] = self.processor.tokenizer.encode(expanded, add_special_tokens=False)
        return out

    def processed(self, image: dict[str, Any]) -> Processed:
        """An image part's processed pixels, their digest and sizes: decoded and processed
        once per image (the last PROCESSED_IMAGES are kept), however often it is rendered."""
        key = hashlib.sha256(f"{image.get('detail') or 'auto'} {image['image_url']}"
                             .encode()).hexdigest()
        with self._lock:
            found = self._processed.get(key)
            if found is not None:
                self._processed.move_to_end(key)
                return found
        made = self._fitted(image)
        with self._lock:
            self._processed[key] = made
            while len(self._processed) > PROCESSED_IMAGES:
                self._processed.popitem(last=False)
        return made

    def _fitted(self, image: dict[str, Any]) -> Processed:
        """The image processed; one that alone would be more image tokens than a request
        holds (a processor that sizes by the image: Qwen-VL's, Pixtral's) is shrunk, its
        aspect kept, until it fits, rather than refused."""
        shrink = 1.0
        for _ in range(8):
            outputs = self.pixels(image, shrink)
            pixels = outputs["pixel_values"]
            sizes = tuple((name, tuple(int(n) for n in outputs[name][0]))
                          for name in SIZE_INPUTS if name in outputs)
            made = Processed(pixels, digest(pixels, sizes), sizes)
            tokens = self.format.count(made)
            if tokens <= REQUEST_IMAGE_ROWS:
                break
            shrink *= 0.97 * (REQUEST_IMAGE_ROWS / tokens) ** 0.5
        return made   # (still too large after 8 tries: expand's limit refuses it)

    def pixels(self, image: dict[str, Any], shrink: float = 1.0) -> dict[str, Any]:
        """The processor's outputs for an image part, its sides scaled by `shrink` first:
        `pixel_values` (numpy; [1, channels, height, width], or Qwen-VL's [patches, patch
        values]) and the image's sizes a vision tower takes (SIZE_INPUTS)."""
        from PIL import Image

        data = parse_data_url(image["image_url"], MAX_DATA_URL_BYTES).data
        with Image.open(io.BytesIO(data)) as img:
            img.seek(0)
            rgb = img.convert("RGB")
        limit = DETAIL_PIXELS.get(image.get("detail") or "auto")
        scale = shrink
        if limit is not None and rgb.width * rgb.height > limit:
            scale *= (limit / (rgb.width * rgb.height)) ** 0.5
        if scale < 1:
            rgb = rgb.resize((max(1, int(rgb.width * scale)), max(1, int(rgb.height * scale))),
                             Image.Resampling.BICUBIC)
        outputs = self.processor.image_processor(images=[rgb], return_tensors="np",
                                                 **self.processor_kwargs)
        return {name: outputs[name] for name in ("pixel_values", *SIZE_INPUTS)
                if name in outputs}


# The processors' per-image size outputs a vision tower takes besides the pixels.
SIZE_INPUTS = ("image_grid_thw", "image_sizes")


@attrs.frozen
class Processed:
    """One image as its processor made it."""

    pixels: Any = attrs.field(eq=False, repr=False)
    digest: str
    sizes: tuple[tuple[str, tuple[int, ...]], ...] = ()   # (SIZE_INPUTS name, value)

    def size(self, name: str) -> tuple[int, ...]:
        return dict(self.sizes)[name]


def digest(pixels: Any, sizes: Any = ()) -> str:
    """An image's content key: its processed pixels, their shape and its sizes."""
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(pixels).tobytes()
                          + repr((pixels.shape, sizes)).encode()).hexdigest()


def prompter_of(tokenizer: Any) -> VisionPrompter | None:
    """The prompter a vision model's tokenizer carries (None for a text model)."""
    prompter = getattr(tokenizer, "_triode_vision", None)
    return prompter if isinstance(prompter, VisionPrompter) else None


# ---- the engine side --------------------------------------------------------------------

class ImageRows:
    """A ring of image feature rows and the images they hold, by digest. Virtual ids are
    `first + serial`, serials never reused; a row serial s lives at s % capacity until
    `capacity` more rows are written."""

    def __init__(self, first: int, capacity: int = IMAGE_ROWS, start: int | None = None):
        self.first = first
        self.capacity = capacity
        self.table: Any = None
        # Serials start at a random point of the id space (a multiple of the capacity, so
        # rows still start at 0): KV caches --prompt-cache-dir kept from another process
        # hold that process's virtual ids, which must not name this one's images.
        span = max(1, (2**31 - 1 - first) // capacity - 2)
        self.next = (secrets.randbelow(span // 2) if start is None else start) * capacity
        self.known: OrderedDict[str, int] = OrderedDict()   # digest → serial of its row 0
        self.computed = 0     # images run through the vision tower (statistics, tests)
        # M-RoPE models (model/mrope.py): each row's position offsets from its token index
        # plus its sequence's delta (time, row, column), and the delta an image's last row
        # adds to the text after it.
        self.grid: Any = None
        self.ends: Any = None
        # Qwen3-VL: per deepstack level, each row's features added after that language
        # layer (model/mrope.py's DeepstackLayer).
        self.deep: list[Any] = []

    def place(self, span: ImageSpan, features: Any,
              layout: tuple[int, int] | None = None, deep: Sequence[Any] = ()) -> int:
        """Writes an image's feature rows ([length, hidden]), for an image of `layout` (its
        rows and columns of tokens) their grid positions, and its `deep` features per
        deepstack level ([length, hidden] each); returns its first serial."""
        import mlx.core as mx

        length = int(features.shape[0])
        if length > self.capacity:
            raise ValueError(f"an image of {length} tokens does not fit the "
                             f"{self.capacity} image rows")
        if self.table is None:
            self.table = mx.zeros((self.capacity, features.shape[-1]), dtype=features.dtype)
        base = self.next
        self.next += length
        rows = mx.arange(base, base + length) % self.capacity
        self.table[rows] = features.astype(self.table.dtype)
        mx.eval(self.table)
        if layout is not None:
            self._lay_out(rows, length, layout)
        for level, values in enumerate(deep):
            if level == len(self.deep):
                self.deep.append(mx.zeros(self.table.shape, dtype=self.table.dtype))
            self.deep[level][rows] = values.astype(self.table.dtype)
        if deep:
            mx.eval(self.deep)
        self.known[span.digest] = base
        self.known.move_to_end(span.digest)
        while self.known and next(iter(self.known.values())) < self.next - self.capacity // 2:
            self.known.popitem(last=False)
        return base

    def _lay_out(self, rows: Any, length: int, layout: tuple[int, int]) -> None:
        """Row k of an image of h x w tokens is at (st, st + r, st + c) for k = r * w + c,
        st its first token's text position: offsets (-k, r - k, c - k) from the position
        text at its index would have. Its last row adds max(h, w) - h * w to the delta of
        the text after it (Qwen2-VL's get_rope_index)."""
        import mlx.core as mx

        h, w = layout
        if h * w != length:
            raise ValueError(f"an image of {length} tokens laid out as {h} x {w}")
        if self.grid is None:
            self.grid = mx.zeros((self.capacity, 3), dtype=mx.int32)
            self.ends = mx.zeros((self.capacity,), dtype=mx.int32)
        k = mx.arange(length, dtype=mx.int32)
        self.grid[rows] = mx.stack([-k, k // w - k, k % w - k], axis=1)
        self.ends[rows] = mx.where(k == length - 1, max(h, w) - length, 0)
        mx.eval(self.grid, self.ends)

    def layout_of(self, ids: Any) -> tuple[Any, Any]:
        """For a batch of ids ([batch, tokens]): each token's grid offsets ([batch, tokens,
        3]; zeros for text) and the delta it ends an image with ([batch, tokens])."""
        import mlx.core as mx

        if self.grid is None:
            return (mx.zeros((*ids.shape, 3), dtype=mx.int32),
                    mx.zeros(ids.shape, dtype=mx.int32))
        virtual = ids >= self.first
        slot = mx.where(virtual, (ids - self.first) % self.capacity, 0)
        return (mx.where(virtual[..., None], self.grid[slot], 0),
                mx.where(virtual, self.ends[slot], 0))

    def deep_of(self, ids: Any) -> list[Any]:
        """For a batch of ids: per deepstack level, what each token adds after that layer
        ([batch, tokens, hidden]; zeros for text)."""
        import mlx.core as mx

        if not self.deep:
            return []
        virtual = (ids >= self.first)[..., None]
        slot = mx.where(ids >= self.first, (ids - self.first) % self.capacity, 0)
        return [mx.where(virtual, table[slot], 0) for table in self.deep]

    def serial(self, span: ImageSpan) -> int | None:
        """The first serial of an image's rows, if it has rows in the newer half of the
        ring: rows about to be overwritten are not reused (the image is placed again, under
        new ids), so a prompt's rows outlive its prefill by half the ring."""
        base = self.known.get(span.digest)
        if base is None or base < self.next - self.capacity // 2:
            return None
        self.known.move_to_end(span.digest)
        return base


class ImageEmbedding:
    """Mixed into the language model's embedding layer (its class swapped, its weights
    untouched): ids past the vocabulary are looked up in the image rows."""

    _triode_rows: ImageRows

    def __call__(self, ids: Any) -> Any:
        import mlx.core as mx

        rows = self._triode_rows
        base = super().__call__(mx.where(ids >= rows.first, 0, ids))  # type: ignore[misc]
        if rows.table is None:
            return base
        virtual = ids >= rows.first
        picked = rows.table[mx.maximum(ids - rows.first, 0) % rows.capacity]
        return mx.where(virtual[..., None], picked.astype(base.dtype), base)


@attrs.define
class Vision:
    """The engine's half of a vision model: mlx-vlm's model (its vision tower and projector
    are used), the image rows, and the prompter handed to the trio side."""

    model: Any
    rows: ImageRows
    prompter: VisionPrompter
    merge: int | None = None   # M-RoPE models: patches per token side (model/mrope.py)

    @property
    def image_token_id(self) -> int:
        return self.prompter.format.image_token_id

    def place(self, prompt: list[int], images: Sequence[ImageSpan]) -> list[int]:
        """The prompt with each image's tokens replaced by its rows' virtual ids, running the
        vision tower for images not in the rows (engine thread)."""
        import mlx.core as mx

        out = list(prompt)
        for span in images:
            run = range(span.start, span.start + span.length)
            at = [i for i in run if prompt[i] == self.image_token_id]   # its image tokens
            base = self.rows.serial(span)
            if base is None:
                # What mlx-vlm's generation puts into the language model's input
                # embeddings at the image's tokens (its scaling included); the mask is the
                # processor's attention mask (Gemma 3's embedding step reads it).
                ids = mx.array([[self.image_token_id] * len(at)])
                extra = {name: mx.array([value]) for name, value in span.sizes}
                # (MLX's own attention: a vision tower may run compiled, Qwen3-VL's does)
                with cpu_attention.mlx_kernels():
                    embedded = self.model.get_input_embeddings(
                        ids, mx.array(span.pixels), mask=mx.ones(ids.shape), **extra)
                layout = None
                if self.merge is not None:
                    if span.grid is None or span.grid[0] != 1:
                        raise ValueError("an M-RoPE image needs a grid of one frame")
                    layout = (span.grid[1] // self.merge, span.grid[2] // self.merge)
                deep = getattr(embedded, "deepstack_visual_embeds", None)
                base = self.rows.place(span, embedded.inputs_embeds[0], layout,
                                       () if deep is None else list(deep))
                self.rows.computed += 1
            first = self.rows.first + base
            for serial, i in enumerate(at, first):
                out[i] = serial
        return out


    def placed(self, cmd: Any) -> Any:
        """An engine Insert whose prompt has its images' virtual ids (`place`); its images
        stay on the request (its logits processors are wrapped by them)."""
        request = cmd.request
        return attrs.evolve(cmd, request=attrs.evolve(
            request, prompt=self.place(list(request.prompt), request.images)))

    def text_context(self, processor: Any) -> Any:
        """A logits processor that sees image tokens as the model's image token, not as the
        virtual ids it could not index logits with (mlx-lm's repetition penalty indexes the
        logits by the last 20 tokens of the context, prompt included)."""
        import mlx.core as mx

        first, image = self.rows.first, self.image_token_id

        def process(tokens: Any, logits: Any) -> Any:
            return processor(mx.where(tokens >= first, image, tokens), logits)

        return process


def load_vision(model: str) -> tuple[Any, Any, Vision]:
    """mlx-vlm's model and processor, the language model as mlx-lm's class over the same
    weights (with image rows in its embedding), and mlx-lm's tokenizer carrying the prompter."""
    import mlx.nn
    from mlx.utils import tree_flatten
    from mlx_lm import utils as lm_utils
    from mlx_vlm import utils as vlm_utils

    nn: Any = mlx.nn
    load_tokenizer: Any = lm_utils.load_tokenizer
    _get_classes: Any = lm_utils._get_classes
    get_model_path: Any = vlm_utils.get_model_path
    vlm: Any
    processor: Any
    vlm, processor = vlm_utils.load(model)
    path = Path(get_model_path(model)) if not Path(model).is_dir() else Path(model)
    config = json.loads((path / "config.json").read_text())
    architecture = ARCHITECTURES[config["model_type"]]
    text_config = dataclasses.asdict(vlm.config.text_config)
    text_config.setdefault("vocab_size", config.get("vocab_size"))
    try:
        text_config = architecture.text_args(text_config)
        image_format = architecture.image_format(processor, config)
    except SettingsError as exc:
        raise SettingsError(f"--model: {model}: {exc}") from None
    model_class, args_class = _get_classes(text_config)
    lm = model_class(args_class.from_dict(text_config))
    weights = {architecture.weight_name(name): value
               for name, value in dict(tree_flatten(vlm.language_model.parameters())).items()}
    quantization = config.get("quantization")
    if quantization:
        nn.quantize(lm, group_size=quantization["group_size"], bits=quantization["bits"],
                    class_predicate=lambda p, m: f"{p}.scales" in weights)
    try:
        lm.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise SettingsError(f"--model: {model}: its language model does not load as "
                            f"mlx-lm's {text_config.get('model_type')!r}: {exc}") from None
    tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = getattr(processor, "chat_template", None)
    rows = ImageRows(first=max(int(text_config["vocab_size"]), len(tokenizer.vocab)))
    embedding = lm.model.embed_tokens
    embedding.__class__ = type(f"Image{type(embedding).__name__}",
                               (ImageEmbedding, type(embedding)), {})
    embedding._triode_rows = rows
    merge = None
    if architecture.mrope:
        from . import mrope

        merge = int(vlm.config.vision_config.spatial_merge_size)
        rotary = vlm.language_model.model.layers[0].self_attn.rotary_emb
        levels = len(getattr(vlm.config.vision_config, "deepstack_visual_indexes", ()) or ())
        mrope.install(lm, rotary, rows, lm.model.norm.weight.dtype, levels)
    prompter = VisionPrompter(image_format, processor, architecture.processor_kwargs(processor))
    tokenizer._triode_vision = prompter
    return lm, tokenizer, Vision(vlm, rows, prompter, merge)
