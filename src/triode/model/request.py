"""One generation request, as translation builds it and the engine runs it (no MLX here).

A `GenerationRequest` is built once, when a response's prompt has been rendered, and is
carried unchanged through the supervisor, the model actor's queue and the engine thread.
"""

from __future__ import annotations

from typing import Any, Iterable

import attrs

from .constraints import Grammar


def _token_ids(ids: Iterable[int]) -> tuple[int, ...]:
    return tuple(ids)


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class Sampling:
    """How the next token is chosen. The model's own defaults fill what a request leaves out
    (`ModelInfo.sampling_defaults`)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float | None = None
    # OpenAI's additive penalties over the tokens generated so far (the prompt's are not
    # counted): a token's logit drops by presence_penalty once it has appeared and by
    # frequency_penalty for each time it has.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0


@attrs.frozen
class ImageSpan:
    """One image of a prompt: its run of tokens (`start`, `length`: from its first image
    token to its last, which for Pixtral's rows holds row breaks too), its processed pixels
    (numpy, as the model's image processor made them) and their digest, which keys its
    features (model/vision.py)."""

    start: int
    length: int
    digest: str
    pixels: Any = attrs.field(eq=False, repr=False)
    # The processor's other outputs for the image that its vision tower takes, by name:
    # Qwen-VL's image_grid_thw (time, height, width in patches), Pixtral's image_sizes
    # (height, width in pixels).
    sizes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def grid(self) -> tuple[int, ...] | None:
        """Qwen-VL's grid of patches (M-RoPE positions), if the image has one."""
        return dict(self.sizes).get("image_grid_thw")


def _spans(spans: Iterable[ImageSpan]) -> tuple[ImageSpan, ...]:
    return tuple(spans)


@attrs.frozen
class GenerationRequest:
    """Everything that decides what one sequence generates.

    `stop` sequences are matched on the decoded text by the supervisor; `priority` orders the
    model actor's wait queue (higher first, arrival order within one priority); everything
    else is the engine's."""

    prompt: tuple[int, ...] = attrs.field(converter=_token_ids)
    max_tokens: int
    sampling: Sampling = Sampling()
    grammar: Grammar | None = None    # constrained decoding (tokenizer-independent data)
    top_logprobs: int | None = None   # None: no logprobs; else alternatives per token
    stop: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    priority: int = 0
    # The prompt cache's namespace (the request's `prompt_cache_key`): a prompt reuses and
    # leaves KV caches among those of requests with the same key; "" is the shared one.
    cache_key: str = ""
    # A vision model's images, at their token runs in `prompt` (model/vision.py).
    images: tuple[ImageSpan, ...] = attrs.field(default=(), converter=_spans)


@attrs.frozen
class Rendered:
    """A chat template's output: the token ids and the text they encode (each image of a
    vision model's prompt is a run of image tokens, `images` says where)."""

    tokens: list[int]
    text: str
    images: tuple[ImageSpan, ...] = ()
