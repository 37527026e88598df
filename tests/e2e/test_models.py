"""Several models in one real server, through the openai SDK: the bundled model, SmolLM2
(the real model, a GGUF) and a Llama 3 fixture (another family, random weights). Loading
on demand, two models streaming at once, LRU eviction at --max-loaded-models 2, a
request's keep_alive, the admin routes (and 409 for a model in use), a previous_response_id
chain that switches models, a model that fails to load, and per-tenant model lists."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterator

import mlx.core as mx
import openai
import pytest

from ..conftest import Server, run_server, wait_until
from ..fixtures.families import FAMILIES, build
from .smollm2 import ensure_smollm2


@pytest.fixture(scope="module")
def llama3(tmp_path_factory) -> Path:
    return build(FAMILIES["llama3"], tmp_path_factory.mktemp("models") / "llama3-fixture")


@pytest.fixture(scope="module")
def three(llama3) -> Iterator[Server]:
    """Three models, two of which fit (--max-loaded-models 2)."""
    ensure_smollm2()
    with run_server("--model", "bundled", "--model", "smollm2", "--model", str(llama3),
                    "--max-loaded-models", "2", "--keep-alive", "10m",
                    "--parallel", "2") as server:
        yield server


def models(server: Server) -> dict[str, dict[str, Any]]:
    listed = server.client().models.list()
    return {m.id: m.to_dict() for m in listed.data}


def statuses(server: Server) -> dict[str, str]:
    return {name: m["status"] for name, m in models(server).items()}


def settled(server: Server) -> dict[str, str]:
    """The statuses once no model is loading or unloading."""
    found: dict[str, str] = {}

    def done() -> bool:
        found.update(statuses(server))
        return not {"loading", "unloading"} & set(found.values())

    wait_until(done, timeout=60)
    return found


def ask(client: openai.OpenAI, model: str, **kw: Any) -> Any:
    return client.responses.create(**{"model": model, "input": "Say hi.",
                                      "max_output_tokens": 8, **kw})


def test_every_model_is_listed_with_its_state_and_the_first_is_loaded(three, llama3):
    listed = models(three)
    assert list(listed) == ["triode-tiny", "smollm2", str(llama3)]
    assert listed["triode-tiny"]["status"] == "loaded"
    for name in ("smollm2", str(llama3)):
        assert listed[name]["status"] in ("unloaded", "loaded")
    smol = listed["smollm2"]
    assert smol["context_window"] == 8192 and smol["pinned"] is False
    assert smol["keep_alive"] == 600 and smol["object"] == "model"
    assert three.http.get("/v1/models/smollm2").json()["id"] == "smollm2"


def test_a_model_loads_when_asked_for_and_two_stream_at_once(three, llama3):
    client = three.client()
    done: dict[str, list[str]] = {}

    def stream(model: str) -> None:
        events = client.responses.create(model=model, input="Count to five.",
                                         max_output_tokens=24, stream=True)
        done[model] = [e.type for e in events]

    threads = [threading.Thread(target=stream, args=(m,)) for m in ("triode-tiny",
                                                                     str(llama3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for model in ("triode-tiny", str(llama3)):
        assert done[model][0] == "response.created"
        assert done[model][-1] in ("response.completed", "response.incomplete")
    assert statuses(three)["triode-tiny"] == "loaded"
    assert statuses(three)[str(llama3)] == "loaded"


def test_the_least_recently_used_model_makes_room_for_a_third(three, llama3):
    client = three.client()
    ask(client, str(llama3))
    ask(client, "triode-tiny")   # llama3 is now the least recently used
    answer = ask(client, "smollm2", input="What is the capital of France?",
                 max_output_tokens=12, temperature=0)
    assert "Paris" in answer.output_text
    assert settled(three) == {"triode-tiny": "loaded", "smollm2": "loaded",
                              str(llama3): "unloaded"}


def test_a_request_s_keep_alive_zero_unloads_its_model_after_it(three, llama3):
    client = three.client()
    ask(client, str(llama3), extra_body={"keep_alive": 0})
    assert settled(three)[str(llama3)] == "unloaded"
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client, "smollm2", extra_body={"keep_alive": "soon"})
    assert refused.value.body["param"] == "keep_alive"


def test_the_admin_routes_load_and_unload_and_never_under_a_request(three, llama3):
    http = three.http
    name = llama3.name   # its directory's name: a name it answers to, that a URL can hold
    loaded = http.post(f"/v1/models/{name}/load")
    assert loaded.status_code == 200 and loaded.json()["status"] == "loaded"
    assert loaded.json()["memory_bytes"] > 0
    client = three.client()
    stream = client.responses.create(model=str(llama3), input="Count.", max_output_tokens=64,
                                     stream=True)
    first = next(iter(stream))
    assert first.type == "response.created"
    busy = http.post(f"/v1/models/{name}/unload")
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "model_busy"
    assert [e.type for e in stream][-1] in ("response.completed", "response.incomplete")
    gone = http.post(f"/v1/models/{name}/unload")
    assert gone.status_code == 200 and gone.json()["status"] == "unloaded"
    assert http.post("/v1/models/nope/load").status_code == 404


def test_a_previous_response_id_chain_may_switch_models(three):
    client = three.client()
    first = ask(client, "triode-tiny", input="My name is Ada.")
    second = client.responses.create(model="smollm2", input="What is my name?",
                                     previous_response_id=first.id, max_output_tokens=12)
    assert second.status in ("completed", "incomplete") and second.model == "smollm2"
    assert second.usage.input_tokens > 15   # the first turn was re-rendered in its template


def test_health_and_metrics_show_each_model(three, llama3):
    """/health and /metrics say what /v1/models says, model by model (whichever are loaded
    after the module's other tests: the xdist workers run them in different orders)."""
    listed = settled(three)
    health = three.health()
    assert [m["id"] for m in health["models"]] == ["triode-tiny", "smollm2", str(llama3)]
    assert {m["id"]: m["status"] for m in health["models"]} == listed
    scrape = three.http.get("/metrics").text
    for name, status in listed.items():
        assert f'triode_model_status{{model="{name}",status="{status}"}} 1.0' in scrape
    assert 'triode_model_memory_bytes{model="smollm2"}' in scrape


def test_a_model_that_fails_to_load_is_failed_and_the_others_serve(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
    mx.save_safetensors(str(broken / "model.safetensors"), {"w": mx.zeros((1,))})
    with run_server("--model", "bundled", "--model", str(broken)) as server:
        client = server.client()
        with pytest.raises(openai.InternalServerError) as failed:
            ask(client, str(broken))
        assert failed.value.body["code"] == "model_load_failed"
        listed = models(server)[str(broken)]
        assert listed["status"] == "failed" and "no_such_architecture" in listed["error"]
        assert ask(client, "triode-tiny").status in ("completed", "incomplete")


def test_each_tenant_sees_and_uses_only_its_models(tmp_path, llama3):
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"tenants": {
        "small": {"keys": ["sk-small"], "models": ["triode-tiny"]},
        "ops": {"keys": ["sk-ops"], "admin": True}}}))
    with run_server("--model", "bundled", "--model", str(llama3),
                    "--api-keys-file", str(keys)) as server:
        small = server.client(api_key="sk-small")
        assert [m.id for m in small.models.list().data] == ["triode-tiny"]
        with pytest.raises(openai.BadRequestError) as refused:
            ask(small, str(llama3))
        assert refused.value.body["code"] == "model_not_found"
        with pytest.raises(openai.NotFoundError):
            small.models.retrieve(llama3.name)
        denied = server.http.post(f"/v1/models/{llama3.name}/load",
                                  headers={"Authorization": "Bearer sk-small"})
        assert denied.status_code == 403
        ops = server.client(api_key="sk-ops")
        assert [m.id for m in ops.models.list().data] == ["triode-tiny", str(llama3)]
        allowed = server.http.post(f"/v1/models/{llama3.name}/load",
                                   headers={"Authorization": "Bearer sk-ops"})
        assert allowed.status_code == 200 and allowed.json()["status"] == "loaded"


def test_a_stream_and_a_background_job_answer_before_their_model_has_loaded(three, llama3):
    """A stream's response.created and a background job's `queued` object come before the
    model's weights (they wait in its queue); both then complete."""
    http, client = three.http, three.client()
    assert http.post(f"/v1/models/{llama3.name}/unload").status_code == 200
    events = client.responses.create(model=str(llama3), input="Hi.", max_output_tokens=8,
                                     stream=True)
    types = [e.type for e in events]
    assert types[0] == "response.created"
    assert types[-1] in ("response.completed", "response.incomplete")
    assert http.post(f"/v1/models/{llama3.name}/unload").status_code == 200
    job = client.responses.create(model=str(llama3), input="Hi.", max_output_tokens=8,
                                  background=True)
    assert job.status in ("queued", "in_progress")
    wait_until(lambda: client.responses.retrieve(job.id).status in ("completed",
                                                                    "incomplete"),
               timeout=60)


def test_a_request_cancelled_while_its_model_loads_cancels_the_load(three):
    """The client gives up while SmolLM2 loads (seconds on this CPU): nobody else waits for
    the model, so its load is cancelled and it is `unloaded` again, not loaded for nobody."""
    import httpx

    http = three.http
    assert http.post("/v1/models/smollm2/unload").status_code == 200
    body = {"model": "smollm2", "input": "Hi.", "max_output_tokens": 8}
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/responses", json=body, timeout=0.3)
    assert settled(three)["smollm2"] == "unloaded"
    assert models(three)["smollm2"]["status"] == "unloaded"
