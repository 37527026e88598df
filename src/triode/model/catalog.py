"""The models a server can serve: `--model` (repeatable), `--models-dir`, `--models-config`.

Each available model is one `ModelSpec`: the names a request's `model` may use (its id, the
one GET /v1/models lists, first), what loads, and its own settings. A setting comes from the
flag when the flag is set to other than its default, else from the model's table of the
config file, else from its `*` table, else from the flag's default.

The config file (TOML, or JSON of the same shape):

    ["*"]                      # defaults for every model
    keep_alive = "10m"

    [smollm2]                  # a model by one of its names (`--model smollm2`), or a new
    alias = "small"            # one with `path`
    context_length = 2048
    pinned = true

Nothing here imports MLX: the catalog is read before any model loads.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Iterable

import attrs

from ..errors import SettingsError
from ..settings import BUNDLED_MODEL, FLAGS, Settings, parse_keep_alive
from .sources import BUNDLED_PATH, SHIPPED, resolve

BUNDLED_ALIAS = "triode-tiny"

# What a model's table may set, and the type each takes (keep_alive: parse_keep_alive).
MODEL_KEYS: dict[str, tuple[type, ...]] = {
    "alias": (str,), "path": (str,), "context_length": (int,), "kv_bits": (int,),
    "attention_window": (int,), "tool_format": (str,), "chat_template": (str,),
    "pinned": (bool,), "keep_alive": (str, int, float), "speculative": (str,),
}
# The keys a flag also sets (the flag wins when set to other than its default).
FLAGGED = ("context_length", "kv_bits", "attention_window", "tool_format", "chat_template",
           "speculative", "keep_alive")


@attrs.frozen
class ModelSpec:
    """One available model."""

    names: tuple[str, ...]              # what a request's `model` may say; the id first
    source: str                         # what loads (a `--model` value: path, short name, ...)
    context_length: int | None = None
    kv_bits: int = 0
    attention_window: int = 0
    tool_format: str | None = None
    chat_template: str | None = None
    speculative: str = "ngram"
    pinned: bool = False                # never unloaded to make room, nor when idle
    keep_alive: float = 300.0           # seconds idle before it unloads; -1: never
    preload: bool = False               # loaded at start (the first --model)

    @property
    def id(self) -> str:
        return self.names[0]

    @property
    def path(self) -> str:
        """What the engine loads."""
        return str(BUNDLED_PATH) if self.source == BUNDLED_MODEL else self.source


def source_names(source: str, alias: str | None = None) -> tuple[str, ...]:
    """The names a model loaded from `source` answers to: the alias first (else the bundled
    model's, else `source` itself), then its path, directory or file name, and a GGUF's
    name without `.gguf`."""
    path = str(BUNDLED_PATH) if source == BUNDLED_MODEL else source
    names: list[str] = []
    if alias:
        names.append(alias)
    if source == BUNDLED_MODEL:
        names.append(BUNDLED_ALIAS)
    names += [source, path, Path(path).name]
    if Path(path).suffix.lower() == ".gguf":
        names.append(Path(path).stem)
    return tuple(dict.fromkeys(n for n in names if n))


def directory_models(directory: str) -> list[str]:
    """The models directly under `directory`: subdirectories with a config.json or a GGUF
    file in them, and GGUF files; sorted by name."""
    found: list[str] = []
    for entry in sorted(Path(directory).iterdir()):
        if entry.is_file() and entry.suffix.lower() == ".gguf":
            found.append(str(entry))
        elif entry.is_dir() and ((entry / "config.json").is_file()
                                 or any(entry.glob("*.gguf"))):
            found.append(str(entry))
    return found


def read_config(path: str) -> dict[str, dict[str, Any]]:
    """The tables of a --models-config file, checked: each a table of known keys."""
    text = Path(path).read_text()
    try:
        data: Any = json.loads(text) if path.lower().endswith(".json") else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"--models-config {path}: cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"--models-config {path}: must be a table of model tables")
    for name, table in data.items():
        if not isinstance(table, dict):
            raise SettingsError(f"--models-config {path}: [{name}] must be a table")
        for key, value in table.items():
            kinds = MODEL_KEYS.get(key)
            if kinds is None:
                raise SettingsError(f"--models-config {path}: [{name}] {key}: unknown "
                                    f"setting (one of {', '.join(MODEL_KEYS)})")
            if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
                raise SettingsError(f"--models-config {path}: [{name}] {key}: "
                                    f"{value!r} is not a {kinds[0].__name__}")
            if key == "keep_alive":
                try:
                    parse_keep_alive(value)  # type: ignore[arg-type]
                except ValueError as exc:
                    raise SettingsError(f"--models-config {path}: [{name}] keep_alive: "
                                        f"{exc}") from None
    return data


def catalog(settings: Settings) -> tuple[ModelSpec, ...]:
    """Every model `settings` make available, the first `--model` first (it is loaded at
    start). A SettingsError names what is wrong: two models under one name, a config table
    that names no model."""
    config = read_config(settings.models_config) if settings.models_config else {}
    defaults = config.get("*", {})
    flag_defaults = {f.field: f.default for f in FLAGS}
    given = settings.model
    if not given and not (settings.models_dir
                          or any("path" in t for n, t in config.items() if n != "*")):
        given = (BUNDLED_MODEL,)   # nothing named: the bundled model, as ever
    sources: list[tuple[str, bool]] = [(m, True) for m in given]   # (source, from --model)
    if settings.models_dir:
        sources += [(d, False) for d in directory_models(settings.models_dir)]
    tables_used: set[str] = set()
    specs: list[ModelSpec] = []

    def table_for(names: Iterable[str]) -> dict[str, Any]:
        for name in names:
            if name in config and name != "*":
                tables_used.add(name)
                return config[name]
        return {}

    def build(source: str, table: dict[str, Any], alias: str | None, preload: bool
              ) -> ModelSpec:
        def value(key: str, flag_value: Any) -> Any:
            if key in FLAGGED and flag_value != flag_defaults[key]:
                return flag_value
            return table.get(key, defaults.get(key, flag_value))

        return ModelSpec(
            names=source_names(source, table.get("alias", alias)), source=source,
            context_length=value("context_length", settings.context_length),
            kv_bits=value("kv_bits", settings.kv_bits),
            attention_window=value("attention_window", settings.attention_window),
            tool_format=value("tool_format", settings.tool_format),
            chat_template=value("chat_template", settings.chat_template),
            speculative=value("speculative", settings.speculative),
            pinned=bool(table.get("pinned", defaults.get("pinned", False))),
            keep_alive=parse_keep_alive(value("keep_alive", settings.keep_alive)),
            preload=preload)

    for i, (source, flagged) in enumerate(sources):
        alias = settings.model_alias if flagged and i == 0 else None
        table = table_for(source_names(source, alias))
        specs.append(build(source, table, alias, preload=flagged and i == 0))
    for name, table in config.items():
        if name == "*" or name in tables_used:
            continue
        if "path" not in table:
            raise SettingsError(f"--models-config {settings.models_config}: [{name}] names "
                                "no available model and has no `path`")
        specs.append(build(table["path"], table, table.get("alias", name), preload=False))
    if len(specs) == 1 and "pinned" not in table_for(specs[0].names) \
            and "pinned" not in defaults:
        specs[0] = attrs.evolve(specs[0], pinned=True)   # a lone model stays, as before
    try:
        check_unique(specs)
        for spec in specs:
            check_spec(spec)
    except SettingsError as exc:
        if settings.models_config:
            raise SettingsError(f"--models-config {settings.models_config}: {exc}") from None
        raise
    return tuple(specs)


def check_unique(specs: list[ModelSpec]) -> None:
    seen: dict[str, str] = {}
    for spec in specs:
        for name in spec.names:
            if name in seen and seen[name] != spec.source:
                raise SettingsError(f"two models answer to {name!r}: {seen[name]} and "
                                    f"{spec.source} (give one an alias)")
            seen[name] = spec.source


def check_spec(spec: ModelSpec) -> None:
    """The settings checks one model's own values must pass (as their flags do)."""
    where = f"model {spec.id}"
    if spec.kv_bits not in (0, 4, 8):
        raise SettingsError(f"{where}: kv_bits must be 0, 4 or 8 (got {spec.kv_bits})")
    if spec.attention_window and spec.attention_window < 16:
        raise SettingsError(f"{where}: attention_window must be 0 or at least 16")
    if spec.attention_window and spec.kv_bits:
        raise SettingsError(f"{where}: attention_window and kv_bits cannot be combined")
    if spec.context_length is not None and spec.context_length < 16:
        raise SettingsError(f"{where}: context_length must be at least 16")
    if spec.speculative not in ("ngram", "off"):
        raise SettingsError(f"{where}: speculative must be ngram or off")


def weight_bytes(spec: ModelSpec) -> int:
    """The bytes of a model's weight files on disk (its weights' memory before any
    conversion; 0 when they cannot be found, e.g. a Hugging Face repo id)."""
    if spec.source in SHIPPED or spec.source.startswith("ollama:"):
        try:
            return os.path.getsize(resolve(spec.source).path)
        except (OSError, SettingsError):
            return 0
    path = Path(spec.path)
    try:
        if path.is_file():
            return path.stat().st_size
        if path.is_dir():
            return sum(f.stat().st_size for f in path.iterdir()
                       if f.suffix in (".safetensors", ".gguf", ".npz"))
    except OSError:
        return 0
    return 0


def model_config(spec: ModelSpec) -> dict[str, Any] | None:
    """The hyper-parameters a model's files state, in config.json's names (a GGUF's read
    from its metadata); None when they cannot be read (a Hugging Face repo id)."""
    try:
        source = resolve(spec.source) if spec.source != BUNDLED_MODEL else None
        if source is not None and source.gguf:
            from .gguf import read

            meta = read(Path(source.path)).meta
            heads = meta.model("attention.head_count", 0)
            return {"max_position_embeddings": meta.model("context_length"),
                    "num_hidden_layers": meta.model("block_count"),
                    "num_attention_heads": heads,
                    "num_key_value_heads": meta.model("attention.head_count_kv", heads),
                    "hidden_size": meta.model("embedding_length")}
        config: dict[str, Any] = json.loads((Path(spec.path) / "config.json").read_text())
        return config.get("text_config", config) if isinstance(config.get("text_config"),
                                                                 dict) else config
    except (OSError, ValueError, SettingsError):
        return None


def native_context(spec: ModelSpec) -> int | None:
    """A model's context window before it loads: its configured one, else what its files
    state (config.json's max_position_embeddings, a GGUF's context_length); None when
    neither can be read."""
    if spec.context_length is not None:
        return spec.context_length
    value = (model_config(spec) or {}).get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else None


# Bytes per KV element as the engine keeps them: float32 on a CPU (the weights run in
# float32 there), 8 or 4 bits (plus a scale and bias per group of 64) with kv_bits.
KV_ELEMENT_BYTES = {0: 4.0, 8: 1.0 + 8 / 64, 4: 0.5 + 8 / 64}


def kv_budget(spec: ModelSpec, parallel: int) -> int:
    """The KV cache `parallel` sequences take at the model's full context (or its
    attention window): its admission budget. 0 when its files do not say."""
    config = model_config(spec) or {}
    try:
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return 0
    context = native_context(spec) or 0
    if spec.attention_window:
        context = min(context, spec.attention_window)
    per_token = 2 * layers * kv_heads * head_dim * KV_ELEMENT_BYTES[spec.kv_bits]
    return int(per_token * context * parallel)
