"""Tenants (`--api-keys-file`), end to end with the openai SDK and raw HTTP: a cross-tenant
matrix over every route and the WebSocket on the memory, Redis and SQLite stores (another
tenant's objects are not found, with the body of an unknown id), the prompt cache namespaced
per tenant, every limit at its edge, the reload on SIGHUP and the startup errors."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from websockets.sync.client import connect

from ..conftest import REDIS_URL, run_server, wait_until
from .test_background import hold_job
from .test_spine import MODEL
from .test_websocket import until_end, ws_url

ALICE, BOB, CAROL = "sk-alice-1", "sk-bob-1", "sk-carol-1"


def keys_file(tmp_path: Path, tenants: dict | None = None) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"tenants": tenants or {
        "alice": {"keys": [ALICE]},
        "bob": {"key_sha256": [hashlib.sha256(BOB.encode()).hexdigest()]}}}))
    return path


def as_tenant(server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, timeout=60.0,
                        headers={"Authorization": f"Bearer {key}"})


@pytest.fixture(scope="module", params=["memory", "redis", "sqlite"])
def tenanted(request, tmp_path_factory):
    """A server with tenants alice, bob and carol, on each store."""
    tmp = tmp_path_factory.mktemp("tenants")
    flags = ["--api-keys-file", str(keys_file(tmp, {
        "alice": {"keys": [ALICE]},
        "bob": {"key_sha256": [hashlib.sha256(BOB.encode()).hexdigest()]},
        "carol": {"keys": [CAROL]}})), "--parallel", "2"]
    if request.param == "redis":
        import uuid

        import redis
        prefix = f"triode-test-{uuid.uuid4().hex[:12]}"
        flags += ["--store", REDIS_URL, "--store-prefix", prefix]
    elif request.param == "sqlite":
        flags += ["--store", f"sqlite:///{tmp / 'store.db'}"]
    try:
        with run_server(*flags) as server:
            yield server
    finally:
        if request.param == "redis":
            client = redis.Redis.from_url(REDIS_URL)
            keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()


def not_found_like_unknown(a: httpx.Client, b: httpx.Client, method: str, path: str,
                           real: str, unknown: str, **kwargs) -> None:
    """B's answer for A's object is exactly what an unknown id gets (status and body)."""
    theirs = b.request(method, path.format(real), **kwargs)
    nobody = b.request(method, path.format(unknown), **kwargs)
    assert theirs.status_code == nobody.status_code, (path, theirs.text)
    assert theirs.status_code in (400, 404), (path, theirs.text)
    assert theirs.text == nobody.text.replace(unknown, real), path


def test_another_tenants_objects_do_not_exist_on_any_route(tenanted):
    """alice's response, its items, its conversation, its background job: for bob every
    route answers as for an id nobody made, and nothing of alice's changes."""
    a, b = as_tenant(tenanted, ALICE), as_tenant(tenanted, BOB)
    r = a.post("/v1/responses", json={"model": MODEL, "input": "Reply with: amber"})
    assert r.status_code == 200, r.text
    resp = r.json()
    item_id = resp["output"][0]["id"]
    conv = a.post("/v1/conversations", json={"items": [
        {"type": "message", "role": "user", "content": "Reply with: falcon"}]}).json()
    conv_item = a.get(f"/v1/conversations/{conv['id']}/items").json()["data"][0]["id"]
    unknown_resp, unknown_conv = "resp_" + "0" * 32, "conv_" + "0" * 32
    for method, path in (("GET", "/v1/responses/{}"),
                         ("GET", "/v1/responses/{}?stream=true"),
                         ("GET", "/v1/responses/{}/input_items"),
                         ("POST", "/v1/responses/{}/cancel"),
                         ("DELETE", "/v1/responses/{}")):
        not_found_like_unknown(a, b, method, path, resp["id"], unknown_resp)
    for body in ({"model": MODEL, "input": "Reply with: x", "previous_response_id": "{}"},
                 {"model": MODEL, "input": [{"type": "item_reference", "id": "{}"}]}):
        real = item_id if "item_reference" in json.dumps(body) else resp["id"]
        unknown = "msg_" + "0" * 32 if real == item_id else unknown_resp
        theirs = b.post("/v1/responses", content=json.dumps(body).replace("{}", real))
        nobody = b.post("/v1/responses", content=json.dumps(body).replace("{}", unknown))
        assert theirs.status_code == nobody.status_code == 400, theirs.text
        assert theirs.text == nobody.text.replace(unknown, real)
    compact = {"model": MODEL, "previous_response_id": resp["id"]}
    theirs = b.post("/v1/responses/compact", json=compact)
    nobody = b.post("/v1/responses/compact", json={**compact, "previous_response_id":
                                                    unknown_resp})
    assert theirs.status_code == nobody.status_code == 400
    assert theirs.text == nobody.text.replace(unknown_resp, resp["id"])
    for method, path, kwargs in (
            ("GET", "/v1/conversations/{}", {}),
            ("POST", "/v1/conversations/{}", {"json": {"metadata": {"k": "v"}}}),
            ("GET", "/v1/conversations/{}/items", {}),
            ("POST", "/v1/conversations/{}/items", {"json": {"items": [
                {"type": "message", "role": "user", "content": "hi"}]}}),
            ("GET", "/v1/conversations/{}/items/" + conv_item, {}),
            ("DELETE", "/v1/conversations/{}/items/" + conv_item, {}),
            ("DELETE", "/v1/conversations/{}", {})):
        not_found_like_unknown(a, b, method, path, conv["id"], unknown_conv, **kwargs)
    # bob's turn in a conversation of the same id is bob's own: alice's is unchanged
    r = b.post("/v1/responses", json={"model": MODEL, "input": "Reply with: zebra",
                                      "conversation": conv["id"]})
    assert r.status_code == 200, r.text
    assert len(a.get(f"/v1/conversations/{conv['id']}/items").json()["data"]) == 1
    bobs = b.get(f"/v1/conversations/{conv['id']}/items?order=asc").json()["data"]
    assert [i["role"] for i in bobs] == ["user", "assistant"]
    # alice still has all of it
    assert a.get(f"/v1/responses/{resp['id']}").json()["id"] == resp["id"]
    assert a.get(f"/v1/responses/{resp['id']}/input_items").status_code == 200
    assert a.get(f"/v1/conversations/{conv['id']}").status_code == 200
    follow = a.post("/v1/responses", json={"model": MODEL, "input": "Reply with: amber",
                                           "previous_response_id": resp["id"]})
    assert follow.status_code == 200, follow.text


def test_another_tenants_background_job_does_not_exist(tenanted):
    """A running job of alice's: bob's poll, stream, cancel and delete are 404 as for an
    unknown id, and it runs on until alice cancels it."""
    a, b = as_tenant(tenanted, ALICE), as_tenant(tenanted, BOB)
    r = a.post("/v1/responses", json=hold_job())
    assert r.status_code == 200, r.text
    job = r.json()
    unknown = "resp_" + "0" * 32
    for method, path in (("GET", "/v1/responses/{}"),
                         ("GET", "/v1/responses/{}?stream=true"),
                         ("POST", "/v1/responses/{}/cancel"),
                         ("DELETE", "/v1/responses/{}")):
        not_found_like_unknown(a, b, method, path, job["id"], unknown)
    body = {"model": MODEL, "input": "x", "previous_response_id": job["id"]}
    assert "not found" in b.post("/v1/responses", json=body).json()["error"]["message"]
    assert a.get(f"/v1/responses/{job['id']}").json()["status"] in ("queued", "in_progress")
    assert a.post(f"/v1/responses/{job['id']}/cancel").json()["status"] == "cancelled"


def test_websocket_continues_only_its_tenants_responses(tenanted):
    """Over the WebSocket, bob cannot continue alice's stored response (not found, as an
    unknown id), and alice can."""
    a = as_tenant(tenanted, ALICE)
    resp = a.post("/v1/responses", json={"model": MODEL, "input": "Reply with: copper"}).json()
    frames = {}
    for who, key in (("bob", BOB), ("alice", ALICE)):
        with connect(ws_url(tenanted), additional_headers={
                "Authorization": f"Bearer {key}"}) as ws:
            ws.send(json.dumps({"type": "response.create", "model": MODEL,
                                "input": "Reply with: copper",
                                "previous_response_id": resp["id"]}))
            frames[who] = until_end(ws)[-1]
    assert frames["bob"]["type"] == "error"
    assert "not found" in json.dumps(frames["bob"]).lower()
    assert frames["alice"]["type"] == "response.completed"


def test_the_prompt_cache_is_per_tenant(tenanted):
    """A prompt alice sent twice is a cache hit for her, and 0 cached tokens for carol (who
    has sent nothing before), whose second send then hits her own; with the same
    prompt_cache_key too."""
    body = {"model": MODEL, "input": "Reply with: violet ocean bread lake"}
    alice = tenanted.client(api_key=ALICE)
    carol = tenanted.client(api_key=CAROL)
    alice.responses.create(**body)
    assert alice.responses.create(**body).usage.input_tokens_details.cached_tokens > 0
    assert carol.responses.create(**body).usage.input_tokens_details.cached_tokens == 0
    assert carol.responses.create(**body).usage.input_tokens_details.cached_tokens > 0
    keyed = {**body, "prompt_cache_key": "shared-name"}
    alice.responses.create(**keyed)
    assert alice.responses.create(**keyed).usage.input_tokens_details.cached_tokens > 0
    assert carol.responses.create(**keyed).usage.input_tokens_details.cached_tokens == 0


def test_keys_are_checked_and_health_is_open(tenanted):
    """A wrong or missing key is 401 everywhere but /health; /health names no tenant."""
    for headers in ({}, {"Authorization": "Bearer sk-nobody"}, {"Authorization": ALICE}):
        r = httpx.get(tenanted.base_url + "/v1/models", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    health = httpx.get(tenanted.base_url + "/health")
    assert health.status_code == 200
    assert "alice" not in health.text and ALICE not in health.text


# ---- limits ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("limits")
    with run_server("--api-keys-file", str(keys_file(tmp, {
            "rpm": {"keys": ["sk-rpm"], "requests_per_minute": 3},
            "wsrpm": {"keys": ["sk-wsrpm"], "requests_per_minute": 3},
            "zero": {"keys": ["sk-zero"], "requests_per_minute": 0},
            "conc": {"keys": ["sk-conc"], "concurrent_requests": 1},
            "tokens": {"keys": ["sk-tokens"], "output_tokens_per_minute": 5},
            "free": {"keys": ["sk-free"]}})), "--parallel", "2") as server:
        yield server


def test_requests_per_minute_at_the_edge(limited):
    """requests_per_minute 3: three requests are answered (the headers count down to 0),
    the fourth is 429 rate_limit_exceeded with Retry-After and the x-ratelimit headers."""
    c = as_tenant(limited, "sk-rpm")
    for remaining in (2, 1, 0):
        r = c.get("/v1/models")
        assert r.status_code == 200
        assert r.headers["x-ratelimit-limit-requests"] == "3"
        assert r.headers["x-ratelimit-remaining-requests"] == str(remaining)
    r = c.get("/v1/models")
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    with pytest.raises(openai.RateLimitError):
        limited.client(api_key="sk-rpm").responses.create(model=MODEL, input="x")
    assert as_tenant(limited, "sk-free").get("/v1/models").status_code == 200


def test_each_websocket_create_is_a_request(limited):
    """requests_per_minute 3 over a WebSocket: the upgrade is one request, two creates are
    answered, the third is an error frame 429 rate_limit_exceeded and the socket stays."""
    with connect(ws_url(limited), additional_headers={"Authorization": "Bearer sk-wsrpm"}) as ws:
        ends = []
        for _ in range(3):
            ws.send(json.dumps({"type": "response.create", "model": MODEL,
                                "input": "Reply with: a"}))
            ends.append(until_end(ws)[-1])
    assert [e["type"] for e in ends] == ["response.completed", "response.completed", "error"]
    assert ends[-1]["status"] == 429 and ends[-1]["error"]["code"] == "rate_limit_exceeded"


def test_a_zero_limit_allows_nothing(limited):
    r = as_tenant(limited, "sk-zero").get("/v1/models")
    assert r.status_code == 429 and r.headers["x-ratelimit-limit-requests"] == "0"


def test_concurrent_requests_at_the_edge(limited):
    """concurrent_requests 1: one response in flight is admitted, a second is 429 while it
    runs (another tenant is not held up), and once it ends there is room again."""
    c = as_tenant(limited, "sk-conc")
    held = create_as(c, hold_job())
    r = c.post("/v1/responses", json={"model": MODEL, "input": "Reply with: a"})
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "rate_limit_exceeded" and r.headers["retry-after"]
    free = as_tenant(limited, "sk-free").post("/v1/responses", json={
        "model": MODEL, "input": "Reply with: a"})
    assert free.status_code == 200
    assert c.post(f"/v1/responses/{held['id']}/cancel").json()["status"] == "cancelled"
    r = c.post("/v1/responses", json={"model": MODEL, "input": "Reply with: a"})
    assert r.status_code == 200, r.text


def create_as(c: httpx.Client, body: dict) -> dict:
    r = c.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_output_tokens_per_minute_at_the_edge(limited):
    """output_tokens_per_minute 5: a request is admitted while the window has budget left
    (4 used: admitted), its tokens are charged at its end; exactly at the limit (5 used)
    the next is 429 with the tokens headers."""
    c = as_tenant(limited, "sk-tokens")
    body = {"model": MODEL, "input": "Reply with: a b c d e f g h"}
    assert create_as(c, {**body, "max_output_tokens": 4})["usage"]["output_tokens"] == 4
    assert create_as(c, {**body, "max_output_tokens": 1})["usage"]["output_tokens"] == 1
    r = c.post("/v1/responses", json=body)
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert r.headers["x-ratelimit-limit-tokens"] == "5"
    assert r.headers["x-ratelimit-remaining-tokens"] == "0"
    assert int(r.headers["retry-after"]) >= 1


def shared_store(kind: str, tmp_path: Path, redis_prefix: str) -> tuple[str, ...]:
    if kind == "redis":
        return ("--store", REDIS_URL, "--store-prefix", redis_prefix)
    return ("--store", f"sqlite:///{tmp_path / 's.db'}")


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_limits_are_shared_by_workers_on_a_shared_store(kind, tmp_path, redis_prefix):
    """Two servers on one store count a tenant's requests per minute together, and its
    responses in flight: a job running on one is the tenant's one concurrent response on
    the other too, until it ends."""
    path = keys_file(tmp_path, {"rpm": {"keys": ["sk-rpm"], "requests_per_minute": 3},
                                "conc": {"keys": ["sk-conc"], "concurrent_requests": 1}})
    flags = ("--api-keys-file", str(path), *shared_store(kind, tmp_path, redis_prefix))
    with run_server(*flags) as one, run_server(*flags) as two:
        statuses = [as_tenant(s, "sk-rpm").get("/v1/models").status_code
                    for s in (one, two, one, two)]
        assert statuses == [200, 200, 200, 429]
        held = create_as(as_tenant(one, "sk-conc"), hold_job())
        refused = as_tenant(two, "sk-conc").post("/v1/responses", json={
            "model": MODEL, "input": "Reply with: a"})
        assert refused.status_code == 429, refused.text
        cancelled = as_tenant(one, "sk-conc").post(f"/v1/responses/{held['id']}/cancel")
        assert cancelled.json()["status"] == "cancelled"
        again = as_tenant(two, "sk-conc").post("/v1/responses", json={
            "model": MODEL, "input": "Reply with: a"})
        assert again.status_code == 200, again.text


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_a_job_on_another_worker_is_still_only_its_tenants(kind, tmp_path, redis_prefix):
    """alice's job running on one worker: through the other worker alice polls, follows
    and cancels it; bob's poll, stream and cancel there are 404 as for an unknown id."""
    flags = ("--api-keys-file", str(keys_file(tmp_path)),
             *shared_store(kind, tmp_path, redis_prefix))
    with run_server(*flags) as one, run_server(*flags) as two:
        job = create_as(as_tenant(one, ALICE), hold_job())
        a, b = as_tenant(two, ALICE), as_tenant(two, BOB)
        wait_until(lambda: a.get(f"/v1/responses/{job['id']}").json()["status"]
                   == "in_progress")
        unknown = "resp_" + "0" * 32
        for method, path in (("GET", "/v1/responses/{}"),
                             ("GET", "/v1/responses/{}?stream=true"),
                             ("POST", "/v1/responses/{}/cancel")):
            not_found_like_unknown(a, b, method, path, job["id"], unknown)
        assert a.post(f"/v1/responses/{job['id']}/cancel").json()["status"] == "cancelled"


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_a_tenants_job_a_restart_cut_ends_failed_as_its_own(kind, tmp_path, redis_prefix):
    """alice's job running when its server is SIGKILLed: after the restart it reads
    `failed` (the restart's reason) for alice, with its items still hers (item_reference
    resolves them), and is not found for bob."""
    flags = ("--api-keys-file", str(keys_file(tmp_path)),
             *shared_store(kind, tmp_path, redis_prefix))
    with run_server(*flags) as server:
        job = create_as(as_tenant(server, ALICE), hold_job(
            input=[{"type": "message", "id": "msg_mine", "role": "user",
                    "content": "Reply with: a"}]))
        wait_until(lambda: as_tenant(server, ALICE).get(
            f"/v1/responses/{job['id']}").json()["status"] == "in_progress")
        server.proc.kill()
        server.proc.wait()
    with run_server(*flags) as server:
        a, b = as_tenant(server, ALICE), as_tenant(server, BOB)
        obj = a.get(f"/v1/responses/{job['id']}").json()
        assert obj["status"] == "failed" and "restarted" in obj["error"]["message"]
        assert b.get(f"/v1/responses/{job['id']}").status_code == 404
        ref = {"model": MODEL, "input": [{"type": "item_reference", "id": "msg_mine"}]}
        assert a.post("/v1/responses", json=ref).status_code == 200
        assert b.post("/v1/responses", json=ref).status_code == 400


# ---- the file: reload and startup ------------------------------------------------------------


def test_sighup_reloads_the_file_and_a_bad_one_keeps_the_old(tmp_path):
    """A new key works after SIGHUP and a removed one is refused; a broken file keeps the
    table in force and says so in one log line."""
    path = keys_file(tmp_path)
    with run_server("--api-keys-file", str(path), "--log-level", "info") as server:
        assert as_tenant(server, ALICE).get("/v1/models").status_code == 200
        assert as_tenant(server, CAROL).get("/v1/models").status_code == 401
        path.write_text(json.dumps({"tenants": {"carol": {"keys": [CAROL]}}}))
        server.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: as_tenant(server, CAROL).get("/v1/models").status_code == 200)
        assert as_tenant(server, ALICE).get("/v1/models").status_code == 401
        path.write_text("{not json")
        server.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: any("tenants in force are kept" in line for line in server.log))
        assert as_tenant(server, CAROL).get("/v1/models").status_code == 200
        assert server.proc.poll() is None
        assert not any(CAROL in line for line in server.log)


@pytest.mark.parametrize("content,message", [
    ("{not json", "not JSON"),
    ('{"tenants": {}}', "expected"),
    ('{"tenants": {"a/b": {"keys": ["k"]}}}', "tenant name"),
    ('{"tenants": {"a": {"keys": ["k"], "request_per_minute": 1}}}', "unknown field"),
    ('{"tenants": {"a": {"keys": ["k"], "requests_per_minute": -1}}}', ">= 0"),
    ('{"tenants": {"a": {"keys": ["k"]}, "b": {"keys": ["k"]}}}', "also belongs"),
    ('{"tenants": {"a": {"key_sha256": ["abc"]}}}', "64 hex"),
])
def test_a_bad_file_is_a_one_line_startup_error(tmp_path, content, message):
    path = tmp_path / "keys.json"
    path.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "triode", "serve", "--port", "0",
                           "--api-keys-file", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--api-keys-file" in lines[0] and message in lines[0], lines
    assert '"k"' not in lines[0]


def test_the_access_log_and_metrics_name_the_tenant_never_the_key(tmp_path):
    """Each line of a tenant's request says `tenant=<name>`; /metrics counts requests and
    tokens by tenant; no key appears in either."""
    with run_server("--api-keys-file", str(keys_file(tmp_path)), "--log-level", "info") as s:
        a, b = as_tenant(s, ALICE), as_tenant(s, BOB)
        rid = a.post("/v1/responses", json={"model": MODEL, "input": "Reply with: a"}).json()["id"]
        assert b.get(f"/v1/responses/{rid}").status_code == 404
        metrics = a.get("/metrics").text
        wait_until(lambda: sum(rid in line for line in s.log) >= 2)
    lines = [line for line in s.log if rid in line]
    assert any("POST /v1/responses 200" in line and "tenant=alice" in line for line in lines)
    assert any(" 404 " in line and "tenant=bob" in line for line in lines)
    assert 'triode_tenant_requests_total{status="200",tenant="alice"} 1.0' in metrics
    assert 'triode_tenant_tokens_total{kind="output",tenant="alice"}' in metrics
    for text in ("".join(s.log), metrics):
        assert ALICE not in text and BOB not in text


def test_input_tokens_and_compact_cannot_read_another_tenants_chain(tenanted):
    """/v1/responses/input_tokens with another tenant's previous_response_id: not found."""
    a, b = as_tenant(tenanted, ALICE), as_tenant(tenanted, BOB)
    rid = a.post("/v1/responses", json={"model": MODEL, "input": "Reply with: a"}).json()["id"]
    body = {"model": MODEL, "input": "x", "previous_response_id": rid}
    assert a.post("/v1/responses/input_tokens", json=body).status_code == 200
    theirs = b.post("/v1/responses/input_tokens", json=body)
    assert theirs.status_code == 400 and "not found" in theirs.json()["error"]["message"]
