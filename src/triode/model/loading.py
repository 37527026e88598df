"""Loading an mlx-lm model and describing it. Runs on the engine thread only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from .parsers import detect_format
from .request import Sampling

# The small model that ships inside the package (weights, tokenizer, template, model card).
BUNDLED_PATH = Path(__file__).resolve().parent / "tiny"


@attrs.frozen
class ModelInfo:
    """What the trio side needs to know about the loaded model (no MLX objects)."""

    path: str
    context_length: int
    eos_token_ids: tuple[int, ...]
    vocab_size: int
    sampling_defaults: Sampling = Sampling()   # for what a request leaves out
    tool_format: str = "none"          # see model/parsers: hermes, mistral, llama3, ...
    reasoning: bool = False            # the vocabulary has <think> and </think>
    blas_threads: int | None = None    # MKL's thread cap in effect; None when MKL is not in use


def load(model: str) -> tuple[Any, Any]:
    """`model`: a local path or a Hugging Face repo id."""
    from mlx_lm import load as mlx_load

    loaded = mlx_load(model)
    return loaded[0], loaded[1]


def describe(model: str, mlx_model: Any, tokenizer: Any, context_length: int | None) -> ModelInfo:
    args = getattr(mlx_model, "args", None)
    native = getattr(args, "max_position_embeddings", None) or 4096
    return ModelInfo(
        path=model,
        context_length=context_length or native,
        eos_token_ids=tuple(sorted(tokenizer.eos_token_ids)),
        vocab_size=len(tokenizer.vocab) if hasattr(tokenizer, "vocab") else 0,
        sampling_defaults=sampling_defaults(Path(model)),
        tool_format=detect_format(getattr(tokenizer, "chat_template", None)),
        reasoning=all(t in getattr(tokenizer, "vocab", {}) for t in ("<think>", "</think>")),
    )


def sampling_defaults(path: Path) -> Sampling:
    """The model's own sampling defaults from its `generation_config.json`, as Hugging Face
    defines them (`do_sample: false` means greedy); OpenAI's for what the file leaves out."""
    try:
        config = json.loads((path / "generation_config.json").read_text())
    except (OSError, ValueError):
        return Sampling()
    if not isinstance(config, dict):
        return Sampling()
    out: dict[str, Any] = {}
    if config.get("do_sample") is False:
        out["temperature"] = 0.0
    elif isinstance(config.get("temperature"), (int, float)):
        out["temperature"] = float(config["temperature"])
    for key in ("top_p", "top_k", "min_p"):
        if isinstance(config.get(key), (int, float)):
            out[key] = config[key]
    return Sampling(**out)
