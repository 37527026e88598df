"""Loading an mlx-lm model and describing it. Runs on the engine thread only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs

from ..errors import SettingsError
from . import gguf, precision
from .families import NONE, Family, detect, family_for, format_names
from .parsers.reasoning import THINK
from .request import Sampling
from .sources import BUNDLED_PATH, resolve
from .templates import TemplateRoles, probe_roles
from .vision import check_vision, vision_config

__all__ = ["BUNDLED_PATH"]   # the small model that ships inside the package

REPO_ID = re.compile(r"(\b[\w\-.]+\b/)?\b[\w\-.]+\b")


@attrs.frozen
class ModelInfo:
    """What the trio side needs to know about the loaded model (no MLX objects)."""

    path: str
    context_length: int
    eos_token_ids: tuple[int, ...]
    vocab_size: int
    sampling_defaults: Sampling = Sampling()   # for what a request leaves out
    family: Family = NONE              # its tool-call format and all that goes with it
                                       # (model/families: hermes, glm47, harmony, ...)
    reasoning: bool = False            # the model has reasoning markers (`think`)
    think: tuple[str, str] = THINK     # they: mlx-lm's think_start / think_end
    template_roles: TemplateRoles = TemplateRoles()   # the roles its chat template refuses
    blas_threads: int | None = None    # MKL's thread cap in effect; None when MKL is not in use
    vision: bool = False               # takes images (a vision-language model, mlx-vlm)
    weights: str = ""                  # how they run, and how they were stored if otherwise:
                                       # "float32 (stored as 4/8-bit)" (model/precision.py)


@attrs.frozen
class LoadOptions:
    """How the model is taken: `tool_format` (`--tool-format`) overrides the detected
    format; `chat_template` (`--chat-template`) is a Jinja file that replaces the model's
    own template; `cpu_weights` (`--cpu-weights`) is the precision policy of
    model/precision.py."""

    tool_format: str | None = None
    chat_template: str | None = None
    cpu_weights: str = "native"


def check_options(options: LoadOptions) -> None:
    """Before anything loads: a SettingsError naming the flag that cannot work."""
    if options.tool_format is not None:
        try:
            family_for(options.tool_format)
        except ValueError:
            raise SettingsError(f"--tool-format must be one of {', '.join(format_names())} "
                                f"(got {options.tool_format!r})") from None
    if options.chat_template is not None:
        read_template(options.chat_template)


def read_template(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SettingsError(f"--chat-template: {path}: {why}") from None


@attrs.frozen
class Loaded:
    """A loaded model: mlx-lm's model and tokenizer, and how its weights run (ModelInfo's
    `weights`)."""

    model: Any
    tokenizer: Any
    weights: str


def load(model: str, options: LoadOptions = LoadOptions()) -> tuple[Any, Any]:
    """`load_model`'s model and tokenizer."""
    loaded = load_model(model, options)
    return loaded.model, loaded.tokenizer


def prefetch(model: str) -> None:
    """What a load of `model` can do before the engine thread, without MLX: a GGUF's
    metadata read and its tokenizer built (seconds for a large vocabulary), kept for the
    load that follows (`gguf.build_tokenizer` takes it). Errors are left to the load."""
    try:
        source = resolve(model)
        if source.gguf:
            gguf.prefetch_tokenizer(Path(source.path))
    except Exception:   # the load reports what is wrong, naming --model
        return


def load_model(model: str, options: LoadOptions = LoadOptions(), *, lazy: bool = False
               ) -> Loaded:
    """`model`: what `--model` names (model/sources.py: a local path, a Hugging Face repo id,
    a GGUF file, `ollama:NAME`, a shipped model's short name). The bundled model's
    architecture file (`tiny/sliding_qwen3.py`, named by its config.json) ships with triode,
    so it is trusted; no other model's code is run. The weights run as `options.cpu_weights`
    decides (model/precision.py). With `options.chat_template` the tokenizer renders that
    template instead of its own (and mlx-lm's Python renderer for it, if it has one).
    `lazy`: the weights are left unevaluated (the engine evaluates them in pieces), but a
    GGUF's that gguf-py dequantizes (types `mx.load` does not read)."""
    source = resolve(model)
    if source.gguf:
        path = Path(source.path)
        count = sum(int(t.n_elements) for t in gguf.read(path).reader.tensors)
        float32 = precision.wants_float32(options.cpu_weights, count)
        mlx_model, tokenizer = gguf.load(path, keep_float=float32)
    else:
        import mlx_lm

        mlx_load: Any = mlx_lm.load
        mlx_model, tokenizer = mlx_load(source.path, trust_remote_code=is_bundled(model),
                                        lazy=lazy)
        float32 = precision.wants_float32(options.cpu_weights,
                                          precision.parameter_count(mlx_model))
    stored = precision.describe(mlx_model)
    weights = stored
    if float32 and stored != "float32":
        precision.to_float32(mlx_model, lazy=lazy)
        weights = f"float32 (stored as {stored})"
    if options.chat_template is not None:
        from mlx_lm.tokenizer_utils import _infer_tool_parser

        infer: Any = _infer_tool_parser
        # What mlx-lm chose differs from what it infers only when the model names it.
        chosen = tokenizer.init_kwargs.get("tool_parser_type")
        configured = chosen if chosen is not None and chosen != infer(tokenizer) \
            else None
        tokenizer.chat_template = read_template(options.chat_template)
        tokenizer._chat_template = None
        tokenizer.init_kwargs["tool_parser_type"] = configured
    return Loaded(mlx_model, tokenizer, weights)


def model_family(tokenizer: Any, options: LoadOptions = LoadOptions()) -> Family:
    """The model's family (its tool-call format): `--tool-format`'s, else that of the format
    mlx-lm chose when it loaded the tokenizer (its config's `tool_parser_type`, else its
    inference), else what `families.detect` makes of the template (a replaced template is
    inferred anew)."""
    if options.tool_format is not None:
        return family_for(options.tool_format)
    kwargs = getattr(tokenizer, "init_kwargs", None) or {}
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return detect(getattr(tokenizer, "chat_template", None), vocab,
                  configured=kwargs.get("tool_parser_type"))


def template_roles(tokenizer: Any) -> TemplateRoles:
    """Which roles the chat template refuses (see `templates.probe_roles`)."""
    if not getattr(tokenizer, "chat_template", None) and \
            getattr(tokenizer, "_chat_template", None) is None:
        return TemplateRoles()

    def render(messages: list[dict[str, Any]]) -> object:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False)

    return probe_roles(render)


def is_bundled(model: str) -> bool:
    try:
        return Path(model).resolve() == BUNDLED_PATH
    except OSError:
        return False


def check_model(model: str) -> None:
    """Before anything loads: raises SettingsError naming `--model` when `model` cannot be
    one. A GGUF (a file, a shipped model, an Ollama model) must be readable and of an
    architecture triode serves. mlx-lm reads any other existing path as a local model and
    anything else as a Hugging Face repo id, so: an existing path must be a directory with a
    config.json; a path that does not exist must at least be a valid repo id (else it is a
    missing directory). A repo id passes: the load looks in the Hugging Face cache, then asks
    the Hub (`load_failure` words what goes wrong there)."""
    source = resolve(model)
    if source.gguf:
        gguf.read(Path(source.path)).architecture
        return
    path = Path(model)
    try:
        exists, is_dir = path.exists(), path.is_dir()
        has_config = is_dir and (path / "config.json").is_file()
    except OSError as exc:
        raise SettingsError(f"--model: {model}: {exc.strerror or exc}") from None
    if exists and not is_dir:
        raise SettingsError(f"--model: {model}: not a directory or a GGUF file")
    if is_dir and not has_config:
        raise SettingsError(f"--model: {model}: no config.json in it (not an mlx-lm model "
                            "directory) and no GGUF file")
    if not exists and not _repo_id(model):
        raise SettingsError(f"--model: {model}: no such directory")
    config = vision_config(model)
    if config is not None:
        check_vision(config, model)


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


def describe(model: str, mlx_model: Any, tokenizer: Any, context_length: int | None,
             options: LoadOptions = LoadOptions()) -> ModelInfo:
    args = getattr(mlx_model, "args", None)
    native = getattr(args, "max_position_embeddings", None) or 4096
    vocab = getattr(tokenizer, "vocab", {})
    thinking = bool(getattr(tokenizer, "has_thinking", False))
    family = model_family(tokenizer, options)
    stops = set(tokenizer.eos_token_ids) | {vocab[m] for m in family.stop_markers if m in vocab}
    return ModelInfo(
        path=model,
        context_length=context_length or native,
        eos_token_ids=tuple(sorted(stops)),
        vocab_size=len(tokenizer.vocab) if hasattr(tokenizer, "vocab") else 0,
        sampling_defaults=source_sampling(model),
        family=family,
        reasoning=thinking or all(t in vocab for t in family.think),
        think=(tokenizer.think_start, tokenizer.think_end) if thinking else family.think,
        template_roles=template_roles(tokenizer),
    )


def source_sampling(model: str) -> Sampling:
    """The sampling defaults the model states: a GGUF's `general.sampling.*` (and an Ollama
    model's params over them), a directory's generation_config.json."""
    source = resolve(model)
    if not source.gguf:
        return sampling_defaults(Path(source.path))
    stated = gguf.sampling_config(gguf.read(Path(source.path)).meta)
    return sampling_from({**stated, **source.sampling})


def sampling_defaults(path: Path) -> Sampling:
    """The model's own sampling defaults from its `generation_config.json`."""
    try:
        config = json.loads((path / "generation_config.json").read_text())
    except (OSError, ValueError):
        return Sampling()
    return sampling_from(config)


def sampling_from(config: Any) -> Sampling:
    """Sampling defaults from generation_config.json's fields, as Hugging Face defines them
    (`do_sample: false` means greedy); OpenAI's for what they leave out."""
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
