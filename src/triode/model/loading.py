"""Loading an mlx-lm model and describing it. Runs on the engine thread only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs

from ..errors import SettingsError
from . import harmony
from .parsers import detect_format
from .request import Sampling

# The small model that ships inside the package (weights, tokenizer, template, model card).
BUNDLED_PATH = Path(__file__).resolve().parent / "tiny"

REPO_ID = re.compile(r"(\b[\w\-.]+\b/)?\b[\w\-.]+\b")


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
    """`model`: a local path or a Hugging Face repo id. The bundled model's architecture file
    (`tiny/sliding_qwen3.py`, named by its config.json) ships with triode, so it is trusted;
    no other model's code is run."""
    from mlx_lm import load as mlx_load

    loaded = mlx_load(model, trust_remote_code=is_bundled(model))
    return loaded[0], loaded[1]


def is_bundled(model: str) -> bool:
    try:
        return Path(model).resolve() == BUNDLED_PATH
    except OSError:
        return False


def check_model(model: str) -> None:
    """Before anything loads: raises SettingsError naming `--model` when `model` cannot be
    one. mlx-lm reads any existing path as a local model and anything else as a Hugging Face
    repo id, so: an existing path must be a directory with a config.json; a path that does
    not exist must at least be a valid repo id (else it is a missing directory). A repo id
    passes: the load looks in the Hugging Face cache, then asks the Hub (`load_failure`
    words what goes wrong there)."""
    path = Path(model)
    try:
        exists, is_dir = path.exists(), path.is_dir()
        has_config = is_dir and (path / "config.json").is_file()
    except OSError as exc:
        raise SettingsError(f"--model: {model}: {exc.strerror or exc}") from None
    if exists and not is_dir:
        raise SettingsError(f"--model: {model}: not a directory")
    if is_dir and not has_config:
        raise SettingsError(f"--model: {model}: no config.json in it (not an mlx-lm model "
                            "directory)")
    if not exists and not _repo_id(model):
        raise SettingsError(f"--model: {model}: no such directory")


def _repo_id(model: str) -> bool:
    """Hugging Face's rule for a repo id (`huggingface_hub`'s `validate_repo_id`)."""
    return (len(model) <= 96 and REPO_ID.fullmatch(model) is not None
            and "--" not in model and ".." not in model and not model.endswith(".git"))


def load_failure(model: str, exc: BaseException) -> SettingsError:
    """What a failed `load(model)` means, in one line naming `--model`: `exc` is what the
    load raised (or an exception group around it)."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, LocalEntryNotFoundError):
        why = "no such directory, and not in the Hugging Face cache; " + (
            "HF_HUB_OFFLINE is set, so the Hub was not asked" if constants.HF_HUB_OFFLINE
            else "the Hugging Face Hub could not be reached to download it")
    elif isinstance(exc, GatedRepoError):
        why = "a gated repository on the Hugging Face Hub: accept its terms and set HF_TOKEN"
    elif isinstance(exc, RepositoryNotFoundError):
        why = ("no such directory, and no such repository on the Hugging Face Hub (a private "
               "one needs HF_TOKEN)")
    elif isinstance(exc, RevisionNotFoundError):
        why = "the Hugging Face Hub has no such revision of it"
    else:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        why = f"cannot load it: {type(exc).__name__}" + (f": {first_line}" if first_line
                                                         else "")
    return SettingsError(f"--model: {model}: {why}")


def describe(model: str, mlx_model: Any, tokenizer: Any, context_length: int | None) -> ModelInfo:
    args = getattr(mlx_model, "args", None)
    native = getattr(args, "max_position_embeddings", None) or 4096
    tool_format = detect_format(getattr(tokenizer, "chat_template", None))
    stops = set(tokenizer.eos_token_ids)
    if tool_format == "harmony":   # a call and a finished answer both end generation
        vocab = getattr(tokenizer, "vocab", {})
        stops |= {vocab[m] for m in harmony.STOP_MARKERS if m in vocab}
    return ModelInfo(
        path=model,
        context_length=context_length or native,
        eos_token_ids=tuple(sorted(stops)),
        vocab_size=len(tokenizer.vocab) if hasattr(tokenizer, "vocab") else 0,
        sampling_defaults=sampling_defaults(Path(model)),
        tool_format=tool_format,
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
