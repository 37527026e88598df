"""The app's transport rules in process (Quart's test client, the real services over a fake
model): the API key, and every error rendered as OpenAI's error object."""

from __future__ import annotations

import pytest

from triode.http.app import OPEN_PATHS, create_app

from .inprocess import MODEL, handles_for


async def app_for(nursery, **kwargs):
    return create_app(await handles_for(nursery, **kwargs), access_log=False).test_client()


@pytest.mark.parametrize("method, path", [("GET", "/v1/models"), ("POST", "/v1/responses"),
                                          ("GET", "/v1/conversations/conv_1"),
                                          ("GET", "/v1/nowhere")])
async def test_with_an_api_key_every_route_but_the_open_ones_answers_401(nursery, method, path):
    """Without the key, or with another one, a request is refused before routing (an unknown
    path is a 401 too, not a 404): the error object, type invalid_request_error."""
    client = await app_for(nursery, api_key="sk-right")
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
        answer = await client.open(path, method=method, headers=headers)
        assert answer.status_code == 401
        assert (await answer.get_json())["error"]["type"] == "invalid_request_error"


async def test_the_right_key_passes_and_open_paths_need_none(nursery):
    """The key as a bearer token is accepted; /openapi.json (an open path) needs none."""
    client = await app_for(nursery, api_key="sk-right")
    models = await client.get("/v1/models", headers={"Authorization": "Bearer sk-right"})
    assert models.status_code == 200
    assert "/openapi.json" in OPEN_PATHS
    assert (await client.get("/openapi.json")).status_code == 200


async def test_routing_errors_are_openai_error_objects(nursery):
    """An unknown path is a 404 with code not_found, a wrong method a 405: both in the error
    object clients parse, not an HTML page."""
    client = await app_for(nursery)
    missing = await client.get("/v1/nowhere")
    assert missing.status_code == 404
    assert (await missing.get_json())["error"]["code"] == "not_found"
    wrong = await client.put("/v1/responses")
    assert wrong.status_code == 405
    assert (await wrong.get_json())["error"]["type"] == "invalid_request_error"


async def test_a_refusal_from_below_keeps_its_status_param_and_code(nursery):
    """An APIError a service raises is rendered as its own body and status."""
    client = await app_for(nursery)
    answer = await client.post("/v1/responses", json={"model": "other", "input": "hi"})
    assert answer.status_code == 400
    error = (await answer.get_json())["error"]
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    bad = await client.post("/v1/responses", json={"model": MODEL, "input": "hi",
                                                   "temperature": "hot"})
    assert bad.status_code == 400
    assert (await bad.get_json())["error"]["param"] == "temperature"
