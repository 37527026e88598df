#!/usr/bin/env python
"""What an image costs a vision model served by triode: time and memory per image, in one run
(issue 28).

The models are random-weight vision models of the two architectures served, each in two
shapes: LLaVA-1.5 (tests/fixtures/vlm.py: a CLIP vision tower, the projector, a Llama
language model) as the test fixture (56 px images, 16 image tokens) and `base`, a CLIP
ViT-B/14-shaped tower (hidden 768, 12 layers, 12 heads, MLP 3072) at 224 px (256 image
tokens) before a 4-layer Llama of hidden 1024 (16 / 8 heads); Gemma 3
(tests/fixtures/gemma3_vlm.py: a SigLIP tower, the pooling projector, a Gemma 3 language
model) as the test fixture (112 px, 16 image tokens) and `gemma3-base`, a SigLIP-B-shaped
tower at 448 px (1,024 patches pooled into 256 image tokens, as a released Gemma 3 gives an
image) before a 4-layer Gemma 3 of hidden 1024 (8 / 4 heads of 128). Each image
is a distinct 640 x 480 PNG of random pixels. The steps are triode's own, in process:

- check: `model.decoding.decode_image` (the request's media step: decode, pixel limit, digest);
- process: the processor's resize, crop and normalization (`VisionPrompter.expand`, while
  the prompt is rendered, on the trio side's worker threads);
- vision: the vision tower and projector for an image not seen before, and writing its
  rows (`Vision.place`, on the engine thread, when the request is inserted);
- prefill: the language model's forward pass over the whole prompt, the image's rows
  included, against a text prompt of the same length (the same work per token);

- decode: a text request's decode step on the vision model (8 sequences, one token each),
  through the embedding with image rows and through the plain embedding class, alternated;

and the memory: the image's rows (tokens x hidden x bytes), its KV cache (tokens x layers x
2 x KV heads x head dim x bytes) and the vision pass's peak above what was allocated before.
Median of `--images` images after one warm-up. BLAS as `triode serve` sets it up (MKL
preloaded, its threads by the model's hidden size). Markdown to stdout.

    .venv/bin/python bench/media.py
    .venv/bin/python bench/media.py --images 10
"""

from __future__ import annotations

import argparse
import base64
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fixtures import gemma3_vlm, vlm  # noqa: E402  (the models)
from tests.fixtures.media import image_bytes  # noqa: E402

LLAVA_PROMPT = "USER: <image>\nWhat is in this picture?\nASSISTANT:"
GEMMA3_PROMPT = ("<bos><start_of_turn>user\n<start_of_image>What is in this picture?"
                 "<end_of_turn>\n<start_of_turn>model\n")
BASE_VISION = {"hidden_size": 768, "num_hidden_layers": 12, "intermediate_size": 3072,
               "num_attention_heads": 12}
# shape: (the fixture builder, its shape arguments, the rendered prompt with one image)
SHAPES = {
    "fixture": (vlm.build, dict(text_shape=vlm.TEXT, vision_shape=vlm.VISION,
                                image_size=vlm.IMAGE_SIZE), LLAVA_PROMPT),
    "base": (vlm.build, dict(text_shape={"hidden_size": 1024, "num_hidden_layers": 4,
                                         "intermediate_size": 3072, "num_attention_heads": 16,
                                         "num_key_value_heads": 8},
                             vision_shape={**BASE_VISION, "projection_dim": 768},
                             image_size=224), LLAVA_PROMPT),
    "gemma3-fixture": (gemma3_vlm.build, {}, GEMMA3_PROMPT),
    # A SigLIP-B-shaped tower at 448 px (32 x 32 patches of 14, pooled 2 x 2 into 256 image
    # tokens, as many as a released Gemma 3 gives an image) before a 4-layer Gemma 3 of
    # hidden 1024.
    "gemma3-base": (gemma3_vlm.build, dict(
        text_shape={"hidden_size": 1024, "num_hidden_layers": 4, "intermediate_size": 4096,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
                    "query_pre_attn_scalar": 128},
        vision_shape=BASE_VISION, image_size=448, image_tokens=256, sliding_window=512),
        GEMMA3_PROMPT),
}


def measure(name: str, images: int) -> dict[str, float]:
    import mlx.core as mx

    from triode.model import decoding as media
    from triode.model.vision import load_vision, prompter_of

    from triode.model import blas

    build, shape, text = SHAPES[name]
    with tempfile.TemporaryDirectory() as tmp:
        lm, tokenizer, vision = load_vision(str(build(Path(tmp) / name, **shape)))
    blas.set_threads(blas.auto_threads(lm.args.hidden_size))   # as the engine does
    prompter = prompter_of(tokenizer)
    assert prompter is not None
    base_tokens = tokenizer.encode(text, add_special_tokens=False)
    args = lm.args
    head_dim = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    kv_per_token = args.num_hidden_layers * 2 * args.num_key_value_heads * head_dim * 4  # f32
    times: dict[str, list[float]] = {k: [] for k in ("check", "process", "vision",
                                                     "prefill", "text_prefill")}
    peaks: list[float] = []
    tokens_per_image = 0
    for i in range(images + 1):
        png = image_bytes(640, 480, seed=100 + i)
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        t0 = time.perf_counter()
        media.decode_image(media.Blob(png, "image/png"), 7680 * 4320)
        t1 = time.perf_counter()
        tokens, spans = prompter.expand(base_tokens, [{"image_url": url, "detail": "auto"}],
                                        text)
        t2 = time.perf_counter()
        mx.synchronize()
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        placed = vision.place(tokens, spans)
        mx.synchronize()
        t3 = time.perf_counter()
        peak = mx.get_peak_memory() - before
        mx.eval(lm(mx.array([placed])))
        t4 = time.perf_counter()
        plain = (base_tokens * (len(placed) // len(base_tokens) + 1))[:len(placed)]
        mx.eval(lm(mx.array([plain])))
        t5 = time.perf_counter()
        if i == 0:
            continue   # warm-up: first calls compile and allocate
        tokens_per_image = spans[0].length
        for key, seconds in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            times[key].append(seconds)
        peaks.append(peak)
    # A text request's decode step on a vision model: 8 sequences, one token each, through
    # the embedding with image rows against the plain embedding class (same weights).
    embedding = lm.model.embed_tokens
    wrapped, plain_class = type(embedding), type(embedding).__mro__[2]
    step = mx.array([[t] for t in base_tokens[:8]])
    decode: dict[type, list[float]] = {wrapped: [], plain_class: []}
    for _ in range(21):
        for cls in (wrapped, plain_class):
            embedding.__class__ = cls
            t0 = time.perf_counter()
            mx.eval(lm(step))
            decode[cls].append(time.perf_counter() - t0)
    embedding.__class__ = wrapped
    rows = vision.rows.table
    row_bytes = tokens_per_image * rows.shape[-1] * rows.dtype.size
    out = {k: statistics.median(v) * 1000 for k, v in times.items()}
    out.update(tokens=tokens_per_image, rows_bytes=row_bytes,
               kv_bytes=tokens_per_image * kv_per_token, peak=statistics.median(peaks),
               prompt=len(placed), ring_bytes=rows.nbytes,
               step=statistics.median(decode[wrapped][1:]) * 1000,
               plain_step=statistics.median(decode[plain_class][1:]) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--images", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    from triode.model import blas

    print(f"BLAS: {blas.preload_blas('auto')} (before MLX loads, as `triode serve` does)")
    print()
    print("| shape | image tokens | check ms | process ms | vision ms | prefill ms (prompt) "
          "| same-length text prefill ms | rows KiB | KV KiB | vision peak MiB | ring MiB "
          "| text decode step ms, with image rows / plain |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        m = measure(name, args.images)
        print(f"| {name} | {m['tokens']:.0f} | {m['check']:.1f} | {m['process']:.1f} | "
              f"{m['vision']:.1f} | {m['prefill']:.1f} ({m['prompt']:.0f} tokens) | "
              f"{m['text_prefill']:.1f} | {m['rows_bytes'] / 1024:.1f} | "
              f"{m['kv_bytes'] / 1024:.1f} | {m['peak'] / 2**20:.1f} | "
              f"{m['ring_bytes'] / 2**20:.1f} | {m['step']:.2f} / {m['plain_step']:.2f} "
              f"({m['step'] / m['plain_step']:.2f}x) |", flush=True)


if __name__ == "__main__":
    main()
