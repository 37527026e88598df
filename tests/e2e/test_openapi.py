"""schemathesis against a real server and the OpenAPI document it serves: every operation,
with bodies and parameters generated from the document (valid ones and, in negative mode,
invalid ones), must answer without a 5xx, with a documented status and content type, and
with a body that conforms to the document's schema for that status.

The operations are parametrized at collection, from the document generated for the app's
routes (`openapi.document`), before any server runs (schemathesis' lazy `from_fixture`
loader does not work under pytest 9.2); the first test checks that the server serves
exactly that document, so the fuzzing runs against what it serves.

Bounded for CI on two cores (about a minute, ~2,800 requests, on a busy one): a short
context window (--context-length) caps what any one generated create can cost; each `/v1`
operation gets up to EXAMPLES_V1 generated requests, its unprefixed alias (the same view)
EXAMPLES_ALIAS, each family's stateful run STATEFUL_SCENARIOS scenarios."""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest
import schemathesis
from hypothesis import settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (content_type_conformance,
                                               response_schema_conformance,
                                               status_code_conformance)

from triode.http.app import create_app
from triode.http.openapi import document

from ..conftest import run_server
from .test_spine import MODEL

API_KEY = "sk-openapi-fuzz"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
EXAMPLES_V1 = 100
EXAMPLES_ALIAS = 10
STATEFUL_SCENARIOS = 60
CONFIG = {
    "cache": {"enabled": False},
    "headers": AUTH,
    "phases": {"examples": {"enabled": True}, "coverage": {"enabled": False},
               "fuzzing": {"enabled": True}, "stateful": {"enabled": True}},
    "generation": {"mode": "all", "max-examples": EXAMPLES_V1, "database": "none"},
    "operations": [{"include-path-regex": "^/(?!v1/)",
                    "generation": {"max-examples": EXAMPLES_ALIAS}}],
}


@pytest.fixture(scope="module")
def api_server():
    with run_server("--api-key", API_KEY, "--context-length", "256") as srv:
        started = time.monotonic()
        yield srv
        print(f"\nschemathesis: {time.monotonic() - started:.0f} s; answers by status: "
              f"{answers_by_status(srv)}")
        health = srv.health()
        assert health["status"] == "ok" and health["engine_alive"], health
        assert not any("Traceback" in line for line in srv.log), "".join(srv.log)


def answers_by_status(srv) -> dict[str, int]:
    """How many requests the server answered, by status (its own /metrics)."""
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(srv.http.get("/metrics", headers=AUTH).text):
        if family.name == "triode_http_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["status"]] += int(sample.value)
    return dict(sorted(counts.items()))


DOCUMENT = document(create_app(None), model=MODEL)
schema = schemathesis.openapi.from_dict(DOCUMENT, config=SchemathesisConfig.from_dict(CONFIG))


# Fields a generated create keeps when it is made to reach generation: none needs state
# on the server (an earlier response, a conversation, tools to match a tool_choice).
STATELESS = ("instructions", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
             "repetition_penalty", "presence_penalty", "frequency_penalty", "store",
             "background", "stream", "metadata", "include", "truncation", "reasoning", "user",
             "service_tier", "parallel_tool_calls")


@schema.hook
def flatmap_body(context, body):
    """Of the generated bodies that name a model, a third name the served one, so they get
    past the model check into the rest of validation, and a third are also cut down to the
    fields that need no state on the server, with a short input and a few output tokens,
    so that when those are valid they reach generation (and the stateful test below gets
    responses to follow)."""
    if not (isinstance(body, dict) and isinstance(body.get("model"), str)):
        return st.just(body)
    generating = {"model": MODEL, "input": "Say hi.", "max_output_tokens": 8,
                  **{k: body[k] for k in STATELESS if k in body}}
    return st.sampled_from([body, {**body, "model": MODEL}, generating])


def test_the_server_serves_the_document(api_server):
    """GET /openapi.json (and /v1/openapi.json), without the API key, is the document the
    operations below are generated from."""
    for path in ("/openapi.json", "/v1/openapi.json"):
        r = api_server.http.get(path)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == DOCUMENT


@schema.parametrize()
def test_every_operation_conforms_to_the_document(case, api_server):
    """Generated requests get a documented, conforming, non-5xx answer."""
    case.call_and_validate(base_url=api_server.base_url, headers=AUTH, checks=CHECKS,
                           timeout=60)


@pytest.mark.parametrize("family", ["responses", "conversations"])
def test_linked_operations_conform_to_the_document(api_server, family):
    """Following the document's links (schemathesis' stateful phase), responses and
    conversations are created, then read, listed, updated, cancelled and deleted: every
    answer is checked as above, so real objects' bodies meet the answer schemas. One family
    of paths at a time: schemathesis starts its scenarios from the operations it finds most
    likely to succeed, and with both families in one document it starts none from
    POST /v1/responses."""
    paths = {path: operations for path, operations in DOCUMENT["paths"].items()
             if re.match(rf"(/v1)?/{family}\b", path)}
    linked = schemathesis.openapi.from_dict({**DOCUMENT, "paths": paths},
                                            config=SchemathesisConfig.from_dict(CONFIG))
    linked.hook(flatmap_body)

    class Workflow(linked.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"base_url": api_server.base_url, "headers": AUTH, "timeout": 60}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, headers=AUTH,
                                   transport_kwargs=kwargs)

    Workflow.run(settings=settings(max_examples=STATEFUL_SCENARIOS, stateful_step_count=8,
                                   deadline=None, database=None))
