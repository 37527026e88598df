"""The keep-alive hang: a client that reuses one connection after a 404 whose request body the
server never read (an unknown route) must not wait forever on the next request."""

from __future__ import annotations

import time

import httpx
import openai

MODEL = "triode-tiny"
ROUNDS = 100
TIMEOUT = 5.0   # per call: a hang is a timeout, not a slow test


def test_404_then_create_on_one_connection_never_hangs(triode):
    """100 x (404 POST with a body, then responses.create) on one connection: 0 hangs."""
    # One openai client, one keep-alive connection, a 5 s timeout per call; all 200 calls are
    # answered over the same connection.
    http = httpx.Client(limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
    client = openai.OpenAI(base_url=triode.base_url + "/v1", api_key="sk-test", max_retries=0,
                           timeout=TIMEOUT, http_client=http)
    ports: set[int] = set()
    answers: list[str] = []
    hangs: list[str] = []
    started = time.monotonic()
    try:
        for i in range(ROUNDS):
            try:
                client.post("/does-not-exist", body={"model": MODEL, "input": "x" * 4096},
                            cast_to=httpx.Response)
                raise AssertionError("the unknown route answered 2xx")
            except openai.NotFoundError as exc:
                ports.add(exc.response.extensions["network_stream"]
                          .get_extra_info("client_addr")[1])
            except openai.APITimeoutError:
                hangs.append(f"round {i}: 404 POST")
            try:
                raw = client.responses.with_raw_response.create(
                    model=MODEL, input=f"Reply with: word {i}", max_output_tokens=16)
                answers.append(raw.parse().output_text)
                ports.add(raw.http_response.extensions["network_stream"]
                          .get_extra_info("client_addr")[1])
            except openai.APITimeoutError:
                hangs.append(f"round {i}: responses.create")
    finally:
        client.close()
    assert hangs == [], f"{len(hangs)} calls hung past {TIMEOUT} s: {hangs[:5]}"
    assert answers == [f"word {i}" for i in range(ROUNDS)]
    assert len(ports) == 1, f"the client opened {len(ports)} connections"
    assert time.monotonic() - started < ROUNDS * 2 * TIMEOUT
