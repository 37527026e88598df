"""The spine end to end: real server process, bundled model, the real openai SDK."""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from ..conftest import run_server, wait_until

MODEL = "triode-tiny"
CANONICAL = re.compile(
    r"response\.created response\.in_progress response\.output_item\.added "
    r"response\.content_part\.added (response\.output_text\.delta )+response\.output_text\.done "
    r"response\.content_part\.done response\.output_item\.done response\.completed")
WORDS = ["amber", "falcon", "Paris", "hello", "42", "green fox", "silver 411 lake", "zebra",
         "Tokyo", "quiet river", "x7", "Monday", "copper", "violet moon", "bread", "ocean 9"]


def sse_events(text: str) -> list[dict]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = block.split("\n")
        assert lines[0].startswith("event: "), block
        data = json.loads(lines[1].removeprefix("data: "))
        assert data["type"] == lines[0].removeprefix("event: ")
        events.append(data)
    return events


def test_reply_hello(client):
    """The newcomer's first request answers exactly, with the model's greedy default."""
    resp = client.responses.create(model=MODEL, input="Reply with: hello", max_output_tokens=64)
    assert resp.output_text == "hello"
    assert resp.status == "completed"
    assert resp.temperature == 0.0
    assert [item.type for item in resp.output] == ["message"]
    assert resp.output[0].id.startswith("msg_") and resp.id.startswith("resp_")


def test_usage_counts_are_real(client, server):
    """usage counts the rendered prompt's tokens and every generated token (the stop too)."""
    from transformers import AutoTokenizer

    from triode.model.loading import BUNDLED_PATH

    tok = AutoTokenizer.from_pretrained(str(BUNDLED_PATH))
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Reply with: amber"}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    resp = client.responses.create(model=MODEL, instructions="Be brief.",
                                   input="Reply with: amber")
    assert resp.output_text == "amber"
    assert resp.usage.input_tokens == len(tok.encode(prompt, add_special_tokens=False))
    assert resp.usage.output_tokens == len(tok.encode("amber", add_special_tokens=False)) + 1
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens


def test_stream_matches_non_streamed_in_canonical_order(client):
    """The SDK's stream helper sees the seed's event order and the non-streamed answer."""
    plain = client.responses.create(model=MODEL, input="Reply with: silver 411 lake")
    types, seqs = [], []
    with client.responses.stream(model=MODEL, input="Reply with: silver 411 lake") as stream:
        for event in stream:
            types.append(event.type)
            seqs.append(event.sequence_number)
        final = stream.get_final_response()
    assert CANONICAL.fullmatch(" ".join(types)), types
    assert seqs == list(range(len(seqs)))
    assert final.output_text == plain.output_text == "silver 411 lake"
    assert final.status == "completed"


def test_stream_item_ids_match_final_object(server):
    """Every id announced in the stream is the id in the final object."""
    body = {"model": MODEL, "input": "Reply with: amber", "stream": True}
    r = server.http.post("/v1/responses", json=body)
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    final = events[-1]["response"]
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    deltas = {e["item_id"] for e in events if e["type"] == "response.output_text.delta"}
    assert added == [item["id"] for item in final["output"]]
    assert deltas == set(added)
    assert events[0]["response"]["id"] == final["id"]
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") \
        == final["output"][0]["content"][0]["text"] == "amber"
    assert "[DONE]" not in r.text


def test_sixteen_concurrent_requests_share_the_batch(server):
    """16 concurrent requests all answer correctly while more than one slot is busy at once."""
    client = server.client()
    busy_seen = []
    stop = threading.Event()

    def poll():
        with httpx.Client(base_url=server.base_url) as http:
            while not stop.is_set():
                busy_seen.append(http.get("/health").json()["slots"]["busy"])

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(
                lambda w: client.responses.create(model=MODEL, input=f"Reply with: {w}").output_text,
                WORDS))
    finally:
        stop.set()
        poller.join()
    assert answers == WORDS
    assert max(busy_seen) > 1


def test_incomplete_at_max_output_tokens(client):
    """A limit that stops generation gives status incomplete with reason max_output_tokens."""
    resp = client.responses.create(model=MODEL, input="Reply with: silver 411 lake",
                                   max_output_tokens=2)
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 2
    assert resp.output_text and "silver 411 lake".startswith(resp.output_text)


def test_input_items_and_instructions(client):
    """Message items with parts, developer role and instructions all reach the template."""
    resp = client.responses.create(model=MODEL, instructions="You are a helpful assistant.", input=[
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Reply with: copper"}]},
    ])
    assert resp.output_text == "copper"
    assert resp.instructions == "You are a helpful assistant."


def test_request_fields_are_echoed(client):
    """Fields the request sets come back on the response object with effective values."""
    resp = client.responses.create(model=MODEL, input="Reply with: a", temperature=0.5, top_p=0.9,
                                   max_output_tokens=32, metadata={"k": "v"}, store=False,
                                   truncation="disabled", user="u1")
    assert (resp.temperature, resp.top_p, resp.max_output_tokens) == (0.5, 0.9, 32)
    assert resp.metadata == {"k": "v"} and resp.store is False and resp.user == "u1"
    assert resp.tools == [] and resp.tool_choice == "auto" and resp.parallel_tool_calls is True
    assert resp.text.format.type == "text" and resp.truncation == "disabled"
    assert resp.model_dump(exclude_unset=True)["background"] is False
    assert (resp.presence_penalty, resp.frequency_penalty) == (0.0, 0.0)


def test_routes_without_v1_prefix(server):
    """Every route is also mounted without /v1."""
    r = server.http.post("/responses", json={"model": MODEL, "input": "Reply with: bread"})
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "bread"
    models = server.http.get("/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == MODEL
    assert server.http.get("/v1/models").json() == models
    assert server.http.get("/health").json()["slots"]["total"] == 8


def test_health_reports_mkl_blas(server):
    """On Linux x86_64 the server runs MLX on MKL by default and says so."""
    import platform

    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("MKL is preloaded on Linux x86_64 only")
    health = server.health()
    assert health["blas"].startswith("mkl")
    # --blas-threads 0 (auto): the bundled model (hidden size 192) runs MKL on one thread.
    assert health["blas_threads"] == 1


# ---- errors -------------------------------------------------------------------------------

def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_malformed_json_is_400(server):
    """A body that is not JSON is a 400 invalid_request_error, not a 500 or plain text."""
    r = server.http.post("/v1/responses", content=b'{"model": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert error_of(r)["type"] == "invalid_request_error"


def test_wrong_model_is_400_model_not_found(client):
    """A model name that is not the loaded model's is a 400 model_not_found."""
    with pytest.raises(openai.BadRequestError) as exc:
        client.responses.create(model="gpt-9", input="hi")
    assert exc.value.status_code == 400
    assert exc.value.body["code"] == "model_not_found" and exc.value.body["param"] == "model"


@pytest.mark.parametrize("body,param", [
    ({"model": MODEL, "input": "x", "max_output_tokens": "64"}, "max_output_tokens"),
    ({"model": MODEL, "input": "x", "temperature": True}, "temperature"),
    ({"model": MODEL, "input": 5}, "input"),
    ({"model": MODEL, "input": [{"role": "user", "content": "a"}, {"role": "user", "content": 3}]},
     "input[1].content"),
    ({"model": MODEL, "input": [{"type": "no_such_item"}]}, "input[0]"),
    ({"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
     "input[0].content[0].text"),
    ({"model": MODEL, "input": [{"role": "robot", "content": "a"}]}, "input[0].role"),
    ({"model": MODEL, "input": "x", "bogus_field": 1}, "bogus_field"),
    ({"input": "x"}, "model"),
    ({"model": MODEL, "input": "x", "temperature": 2.5}, "temperature"),
    ({"model": MODEL, "input": "x", "top_p": -0.1}, "top_p"),
    ({"model": MODEL, "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": MODEL, "input": "x", "truncation": "middle"}, "truncation"),
    ({"model": MODEL, "input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"model": MODEL, "input": "x", "stream": True, "background": True}, "stream"),
    ({"model": MODEL, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}]},
     "input[0].content[0]"),
])
def test_bad_fields_are_400_naming_the_param(server, body, param):
    """Wrong types, unknown fields and out-of-range values are 400s whose param names the field."""
    r = server.http.post("/v1/responses", json=body)
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param, err


def test_metadata_at_the_limit_is_accepted(client):
    """Exactly 16 metadata entries is fine; 17 is the 400 above."""
    meta = {f"k{i}": "v" for i in range(16)}
    assert client.responses.create(model=MODEL, input="Reply with: a", metadata=meta).metadata == meta


def test_a_prompt_without_prompts_dir_is_refused_by_name(server):
    """Stored prompts need --prompts-dir: without it a `prompt` is a 400 naming it, never
    silently ignored."""
    r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                "prompt": {"id": "pmpt_1"}})
    assert r.status_code == 400
    assert error_of(r)["param"] == "prompt" and "--prompts-dir" in error_of(r)["message"]


def test_include_takes_openais_values_and_names_an_unknown_one(server):
    """Every include value OpenAI defines is accepted (those about hosted tools' items change
    nothing here); any other is a 400 naming its index."""
    from triode.responses.translate import INCLUDES

    r = server.http.post("/v1/responses", json={"model": MODEL, "input": "Reply with: a",
                                                "include": list(INCLUDES)})
    assert r.status_code == 200, r.text
    r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                "include": [INCLUDES[0], "nonsense.values"]})
    assert r.status_code == 400 and error_of(r)["param"] == "include[1]"


def test_item_reference_resolves_stored_items_and_names_an_unknown_id(client, server):
    """An item_reference (typed, or a bare {"id"}) stands for the stored input or output
    item with that id: a request that references the earlier turn's items renders exactly
    as one that sends them whole. An unknown id is a 400 naming input[i].id."""
    first = client.responses.create(model=MODEL, input="Reply with: amber falcon")
    stored_input = client.responses.input_items.list(first.id).data[0]
    answer = first.output[0]
    follow = {"role": "user", "content": "Repeat your first answer."}
    by_reference = client.responses.input_tokens.count(model=MODEL, input=[
        {"type": "item_reference", "id": stored_input.id}, {"id": answer.id}, follow])
    whole = client.responses.input_tokens.count(model=MODEL, input=[
        {"role": "user", "content": "Reply with: amber falcon"},
        {"role": "assistant", "content": answer.content[0].text}, follow])
    assert by_reference.input_tokens == whole.input_tokens
    again = client.responses.create(model=MODEL, input=[
        {"type": "item_reference", "id": stored_input.id}, {"id": answer.id}, follow])
    assert again.output_text == "amber falcon"
    r = server.http.post("/v1/responses", json={"model": MODEL, "input": [
        {"role": "user", "content": "hi"}, {"type": "item_reference", "id": "msg_nope"}]})
    assert r.status_code == 400 and error_of(r)["param"] == "input[1].id"
    assert "msg_nope" in error_of(r)["message"]


# ---- slots, queue, disconnect ------------------------------------------------------------

# A request that holds its slot for thousands of steps whatever the model would rather do:
# the schema demands a 2,000-character string, and constrained decoding cannot end it early.
HOLD = {"model": MODEL, "input": "Reply with: a", "stream": True, "max_output_tokens": 4000,
        "text": {"format": {"type": "json_schema", "name": "hold", "strict": True, "schema": {
            "type": "object", "properties": {"a": {"type": "string", "minLength": 2000}},
            "required": ["a"], "additionalProperties": False}}}}


def test_disconnect_frees_the_slot(server):
    """A client that disconnects mid-stream cancels its generation and frees its slot."""
    before = server.health()["generation"]["tokens"]
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        with http.stream("POST", "/v1/responses", json=HOLD) as r:
            lines = r.iter_lines()   # kept referenced: a dropped iterator closes the stream
            created = json.loads(next(line for line in lines if line.startswith("data: "))
                                 .removeprefix("data: "))
            for line in lines:
                if line.startswith("event: response.output_text.delta"):
                    break
            assert server.health()["slots"]["busy"] == 1
    wait_until(lambda: server.health()["slots"]["busy"] == 0)
    generated = server.health()["generation"]["tokens"] - before
    assert generated < 1000
    wait_until(lambda: server.health()["responses"]["live"] == 0)
    stored = server.http.get(f"/v1/responses/{created['response']['id']}").json()
    assert stored["status"] == "cancelled"


def test_full_queue_is_503():
    """With every slot busy and the wait queue full, create is 503 server_overloaded."""
    with run_server("--parallel", "1", "--max-queue", "0") as srv:
        with httpx.Client(base_url=srv.base_url, timeout=60) as http:
            with http.stream("POST", "/v1/responses", json=HOLD) as r:
                lines = r.iter_lines()   # kept referenced: a dropped iterator closes the stream
                for line in lines:
                    if line.startswith("event: response.output_text.delta"):
                        break
                assert srv.health()["slots"]["busy"] == 1
                second = srv.http.post("/v1/responses", json={"model": MODEL, "input": "hi"})
                assert second.status_code == 503
                err = error_of(second)
                assert (err["type"], err["code"]) == ("server_error", "server_overloaded")
        wait_until(lambda: srv.health()["slots"]["busy"] == 0)
        ok = srv.client().responses.create(model=MODEL, input="Reply with: again")
        assert ok.output_text == "again"


def test_api_key_guards_every_route_but_health():
    """--api-key requires the Bearer key everywhere except /health."""
    with run_server("--api-key", "sekrit") as srv:
        assert srv.http.get("/health").status_code == 200
        r = srv.http.get("/v1/models")
        assert r.status_code == 401 and error_of(r)["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            srv.client(api_key="wrong").responses.create(model=MODEL, input="hi")
        ok = srv.client(api_key="sekrit").responses.create(model=MODEL, input="Reply with: ok")
        assert ok.output_text == "ok"


def test_runs_under_plain_hypercorn():
    """`hypercorn --worker-class trio 'triode.http.app:create_app()'` serves the same API."""
    import os
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "TRIODE_PARALLEL": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hypercorn", "--worker-class", "trio", "--bind",
         f"127.0.0.1:{port}", "triode.http.app:create_app()"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"

        def up():
            try:
                return httpx.get(base + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                time.sleep(0.2)
                return False

        wait_until(up, timeout=120)
        assert httpx.get(base + "/health").json()["slots"]["total"] == 2
        client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        assert client.responses.create(model=MODEL, input="Reply with: hypercorn").output_text \
            == "hypercorn"
    finally:
        proc.terminate()
        proc.wait(10)
