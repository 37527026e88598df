"""GGUF fixtures through a real server: an Ollama store's model by name, and a Gemma 3 file
(SentencePiece vocabulary, sliding-window layers) served directly. Random weights: the tests
assert structure, and constrained decoding makes well-formed output."""

from __future__ import annotations

import json

from ..conftest import run_server
from ..fixtures.gguf_files import build_pair
from ..model.test_sources import write_ollama_model

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["n"],
          "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}}


def structured(server, model: str) -> dict:
    resp = server.client().responses.create(
        model=model, input="A number, please.", max_output_tokens=16, temperature=0,
        text={"format": {"type": "json_schema", "name": "n", "schema": SCHEMA,
                         "strict": True}})
    assert resp.status == "completed"
    return json.loads(resp.output_text)


def test_an_ollama_model_is_served_by_its_name(tmp_path):
    """`--model ollama:NAME:TAG` reads the GGUF blob from the store OLLAMA_MODELS names; the
    model answers under that name, with the params layer's sampling defaults."""
    store = tmp_path / "models"
    write_ollama_model(store, "tiny", "1b", build_pair("llama", tmp_path, "q8_0").gguf,
                       params={"temperature": 0.0})
    with run_server("--model", "ollama:tiny:1b", env={"OLLAMA_MODELS": str(store)}) as server:
        assert [m["id"] for m in server.http.get("/v1/models").json()["data"]] == \
            ["ollama:tiny:1b"]
        assert server.health()["weights"] == "float32 (stored as 8-bit)"
        assert set(structured(server, "ollama:tiny:1b")) == {"n"}
        resp = server.client().responses.create(model="ollama:tiny:1b", input="Hi",
                                                max_output_tokens=4)
        assert resp.temperature == 0.0   # the Ollama model's own default


def test_a_gemma3_gguf_is_served_directly(tmp_path):
    """A Gemma 3 GGUF file: its SentencePiece tokenizer, template and sliding-window layers
    through the whole server; a chain's next turn reuses the prompt cache."""
    pair = build_pair("gemma3", tmp_path)
    with run_server("--model", str(pair.gguf)) as server:
        name = pair.gguf.stem
        assert set(structured(server, name)) == {"n"}
        client = server.client()
        first = client.responses.create(model=name, input="Hello there, friend.",
                                        max_output_tokens=4, temperature=0)
        second = client.responses.create(model=name, input="And again.",
                                         previous_response_id=first.id, max_output_tokens=4,
                                         temperature=0)
        assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
