"""Random request bodies against a real server: whatever a client sends, the answer is a
response or a 4xx naming the problem, never a 5xx, and the server keeps serving.

Bodies start from a valid create and get a few of CreateResponse's own fields replaced by
arbitrary JSON (nested objects and lists whose keys are the item and format vocabulary), so
they reach deep into validation instead of failing at the first field."""

from __future__ import annotations

import json
import re
import threading

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triode.responses.wire import CreateResponse

from ..conftest import run_server, wait_until
from .test_spine import MODEL

FIELDS = sorted(f.name for f in attrs.fields(CreateResponse))
KEYS = ["type", "role", "content", "text", "name", "format", "schema", "strict", "properties",
        "parameters", "id", "call_id", "output", "arguments", "effort", "summary", "items",
        "required", "minLength", "compact_threshold"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**63, max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", MODEL, "auto", "none", "required", "disabled", "json_schema",
                     "json_object", "function", "message", "user", "assistant", "input_text",
                     "output_text", "low", "high"]),
    st.text(max_size=20))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=12)
ALLOWED = {200, 400, 404, 409, 429}


@pytest.fixture(scope="module")
def fuzzed():
    with run_server("--parallel", "2") as srv:
        yield srv
        health = srv.health()
        assert health["status"] == "ok" and health["engine_alive"]
        assert not any("Traceback" in line for line in srv.log), "".join(srv.log)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(replaced=st.dictionaries(st.sampled_from(FIELDS), JSON, min_size=1, max_size=4))
def test_random_create_bodies_get_a_response_or_a_4xx(fuzzed, replaced):
    body = {"model": MODEL, "input": "Reply with: ok", "max_output_tokens": 8,
            **replaced}
    body.pop("stream", None)   # a streamed answer is read like any other below
    r = fuzzed.http.post("/v1/responses", content=json.dumps(body),
                         headers={"Content-Type": "application/json"})
    assert r.status_code in ALLOWED, (r.status_code, r.text, body)
    if r.status_code != 200:
        error = r.json()["error"]
        assert error["message"] and error["type"], error
    elif r.json().get("background") and r.json()["status"] not in ("completed", "failed",
                                                                   "cancelled", "incomplete"):
        assert fuzzed.http.post(f"/v1/responses/{r.json()['id']}/cancel").status_code == 200


def test_huge_inputs_do_not_hold_up_ordinary_requests():
    """Tokenizing a multi-megabyte input takes seconds; such renders take turns on a
    limiter of their own, so ordinary requests sent meanwhile are answered first instead of
    queueing behind them (both huge ones are refused: longer than the context window)."""
    huge = {"model": MODEL, "input": "hello world " * ((4 << 20) // 12), "max_output_tokens": 4}
    finished: list[str] = []
    with run_server() as srv:
        def post_huge() -> None:
            r = srv.http.post("/v1/responses", json=huge, timeout=300)
            assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
            finished.append("huge")

        threads = [threading.Thread(target=post_huge) for _ in range(2)]
        for t in threads:
            t.start()
        wait_until(lambda: srv.health()["generation"]["rendering"] == 2)
        r = srv.http.post("/v1/responses", json={"model": MODEL, "input": "Reply with: hello"})
        finished.append("ordinary")
        for t in threads:
            t.join()
        assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "hello"
        assert finished == ["ordinary", "huge", "huge"]


def nested(levels: int) -> list:
    """A JSON list nested `levels` deep: [] is one level, [[]] two."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("path", ["/v1/responses/input_tokens", "/v1/responses",
                                  "/v1/responses/compact"])
def test_bodies_nested_past_the_limit_are_400(fuzzed, path):
    """MAX_JSON_DEPTH counts the body as level 1: chat_template_kwargs (level 2) holding a
    list nested to level 64 is accepted, one level more is a 400 naming the field, and a
    body nested 100,000 deep (deeper than the parser's stack) is a 400 too, never a 500."""
    from triode.http.body import MAX_JSON_DEPTH

    def body(levels: int) -> dict:
        return {"model": MODEL, "input": "Reply with: ok", "max_output_tokens": 4,
                "chat_template_kwargs": {"deep": nested(levels)}}

    at_limit = fuzzed.http.post(path, json=body(MAX_JSON_DEPTH - 2))
    assert at_limit.status_code == 200, at_limit.text   # /compact: kept whole, too short
    over = fuzzed.http.post(path, json=body(MAX_JSON_DEPTH - 1))
    assert over.status_code == 400, over.text
    assert over.json()["error"]["param"] == "chat_template_kwargs"
    assert f"more than {MAX_JSON_DEPTH} levels" in over.json()["error"]["message"]
    abyss = '{"model": "%s", "input": %s}' % (MODEL, "[" * 100_000 + "]" * 100_000)
    r = fuzzed.http.post(path, content=abyss, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "nested more than" in r.json()["error"]["message"]


@pytest.mark.parametrize("raw, param", [
    ('"input": "Reply with: \\ud800"', "input"),
    ('"input": "hi", "instructions": "\\udfff\\ud800"', "instructions"),
    ('"input": "hi", "metadata": {"\\ud800": "v"}', "metadata"),
    ('"input": [{"role": "user", "content": [{"type": "input_text", "text": "\\udc00"}]}]',
     "input"),
])
def test_unpaired_surrogates_are_400_naming_the_field(fuzzed, raw, param):
    """JSON may escape a lone UTF-16 surrogate, which no UTF-8 encoder (tokenizer, echo,
    store) accepts: it is refused at the door, on every route that reads a body. Before,
    these were 500s, or a reset connection when the echo could not be encoded."""
    body = ('{"model": "%s", "max_output_tokens": 4, %s}' % (MODEL, raw)).encode()
    for path in ("/v1/responses", "/v1/responses/input_tokens", "/v1/responses/compact"):
        r = fuzzed.http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["param"] == param and "unpaired surrogate" in r.text


def test_a_surrogate_pair_is_one_character_and_accepted(fuzzed):
    body = ('{"model": "%s", "max_output_tokens": 4, "input": "Reply with: \\ud83d\\ude00", '
            '"metadata": {"k": "\\ud83d\\ude00"}}' % MODEL).encode()
    r = fuzzed.http.post("/v1/responses", content=body,
                         headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] == {"k": "\N{GRINNING FACE}"}


# ---- any value at any depth ------------------------------------------------------------------
# Valid bodies that reach every part of validation: tools of each kind, a forced tool choice,
# a strict JSON schema, reasoning, and input items of every type a client replays. One to
# three values anywhere in them (a field, a list element, a value deep in a schema or a tool's
# parameters) are replaced by arbitrary JSON.

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
          "additionalProperties": False}
TOOLS = [{"type": "function", "name": "lookup", "description": "find a word", "strict": True,
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                         "required": ["q"], "additionalProperties": False}},
         {"type": "custom", "name": "patch", "description": "apply a patch"},
         {"type": "web_search"}]
ITEMS = [
    {"type": "message", "role": "developer", "content": "Answer briefly."},
    {"type": "message", "role": "user",
     "content": [{"type": "input_text", "text": "Call lookup with q=kite"}]},
    {"type": "function_call", "call_id": "call_1", "name": "lookup",
     "arguments": "{\"q\": \"kite\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "a kite flies"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "ok"}]},
    {"type": "custom_tool_call", "call_id": "call_2", "name": "patch", "input": "diff"},
    {"type": "custom_tool_call_output", "call_id": "call_2", "output": "applied"},
    {"type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "The result is a kite.", "annotations": []}]},
    {"role": "user", "content": "Reply with: ok"},
]
CREATE = {"model": MODEL, "input": ITEMS, "instructions": "Be brief.", "tools": TOOLS,
          "tool_choice": "auto", "parallel_tool_calls": True, "max_output_tokens": 8,
          "temperature": 0.5, "top_p": 0.9, "store": True, "metadata": {"k": "v"},
          "reasoning": {"effort": "low", "summary": "auto"}, "truncation": "auto",
          "text": {"format": {"type": "json_schema", "name": "a", "strict": True,
                              "schema": SCHEMA}, "verbosity": "low"},
          "include": ["reasoning.encrypted_content"], "prompt_cache_key": "fuzz",
          "user": "u", "safety_identifier": "s", "service_tier": "auto",
          "client_metadata": {"x": "y"}}
BODIES = {
    "/v1/responses": CREATE,
    "/v1/responses/input_tokens": {k: v for k, v in CREATE.items()
                                   if k not in ("store", "metadata", "include", "user",
                                                "safety_identifier", "service_tier",
                                                "client_metadata", "temperature", "top_p",
                                                "max_output_tokens", "prompt_cache_key")},
    "/v1/responses/compact": {"model": MODEL, "input": ITEMS, "instructions": "Be brief.",
                              "tools": TOOLS, "keep_tokens": 16, "metadata": {"k": "v"}},
    # The other APIs' routes, each a translation onto a create (docs/compatibility.md).
    "/v1/chat/completions": {
        "model": MODEL, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Answer briefly."}]},
            {"role": "user", "content": [{"type": "text", "text": "Call lookup with q=kite"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "lookup", "arguments": "{\"q\": \"kite\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a kite flies"},
            {"role": "user", "content": "Reply with: ok"}],
        "tools": [{"type": "function", "function": {k: v for k, v in TOOLS[0].items()
                                                    if k != "type"}}],
        "tool_choice": "auto", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "a", "strict": True, "schema": SCHEMA}},
        "logprobs": True, "top_logprobs": 1, "stop": ["\n\n"], "user": "u", "seed": 1,
        "reasoning_effort": "low", "metadata": {"k": "v"}},
    "/v1/messages": {
        "model": MODEL, "max_tokens": 8, "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Call lookup with q=kite"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": "kite"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "a kite flies"},
                {"type": "text", "text": "Reply with: ok"}]}],
        "tools": [{"name": "lookup", "description": "find a word",
                   "input_schema": TOOLS[0]["parameters"]}],
        "tool_choice": {"type": "auto"}, "stop_sequences": ["\n\n"], "temperature": 0.5,
        "metadata": {"user_id": "u"}, "thinking": {"type": "disabled"}},
    "/v1/completions": {"model": MODEL, "prompt": "Reply with: ok", "max_tokens": 8,
                        "temperature": 0.5, "top_p": 0.9, "stop": ["\n"], "logprobs": 1,
                        "echo": True, "seed": 1, "user": "u"},
}
# Anthropic's errors name the field at the start of their message ("messages.0.role: ...").
ANTHROPIC = ("/v1/messages",)


def named(route: str, error: dict) -> tuple[str | None, str | None]:
    """(the field an error names, its code) in the route's own error shape."""
    if route in ANTHROPIC:
        message = error["message"]
        return (message.split(": ", 1)[0] if ": " in message else None), None
    return error["param"], error["code"]


def paths(value: object, at: tuple = ()) -> list[tuple]:
    """Every place in `value` that holds a value: dict keys and list indexes, nested."""
    found = [at] if at else []
    if isinstance(value, dict):
        for k, v in value.items():
            found += paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += paths(v, (*at, i))
    return found


def holds(value: object, at: tuple) -> bool:
    """Whether `at` is still a place in `value` (an earlier replacement may have removed it)."""
    for p in at:
        if isinstance(value, dict) and p in value:
            value = value[p]
        elif isinstance(value, list) and isinstance(p, int) and p < len(value):
            value = value[p]
        else:
            return False
    return True


def replace(value: object, at: tuple, new: object) -> object:
    if not at:
        return new
    head, rest = at[0], at[1:]
    if isinstance(value, dict):
        return {**value, head: replace(value[head], rest, new)}
    assert isinstance(value, list)
    return [replace(v, rest, new) if i == head else v for i, v in enumerate(value)]


def dotted(at: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at).lstrip(".")


def replacements(route: str) -> st.SearchStrategy[list[tuple[tuple, object]]]:
    return st.lists(st.tuples(st.sampled_from(paths(BODIES[route])), JSON), min_size=1,
                    max_size=3)


def test_the_deep_fuzz_bodies_are_valid(fuzzed):
    """Unchanged, each body is accepted: every replacement starts from a valid request."""
    for route, body in BODIES.items():
        r = fuzzed.http.post(route, json=body)
        assert r.status_code == 200, (route, r.text)


@pytest.mark.parametrize("route", sorted(BODIES))
def test_any_value_at_any_depth_gets_a_response_or_a_4xx_naming_the_field(fuzzed, route):
    @settings(max_examples=120, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(changes=replacements(route))
    def check(changes: list[tuple[tuple, object]]) -> None:
        body: object = BODIES[route]
        made = []   # the replacements whose place still existed (an earlier one may drop it)
        for at, new in changes:
            if holds(body, at):
                body = replace(body, at, new)
                made.append((at, new))
        changes = made
        r = fuzzed.http.post(route, content=json.dumps(body),
                             headers={"Content-Type": "application/json"})
        assert r.status_code in ALLOWED, (r.status_code, r.text, body)
        if r.status_code == 200:
            if isinstance(body, dict) and body.get("background") is True:
                fuzzed.http.post(f"/v1/responses/{r.json()['id']}/cancel")
            return
        error = r.json()["error"]
        assert error["message"] and error["type"], error
        # The 400 names a field: the one a replacement reached, or one that the replaced
        # value made wrong (a tool call whose tool is gone, a format a schema no longer
        # fits) under the same top-level field; or, when the change made the prompt (or a
        # compaction's summary) too long, the input with context_length_exceeded.
        tops = {str(at[0]) for at, _ in changes}
        param, code = named(route, error)
        assert param is not None, (error, [dotted(at) for at, _ in changes])
        assert re.split(r"[.\[]", param)[0] in tops or (
            param in ("input", "messages", "prompt") and (
                code == "context_length_exceeded" or "context window" in error["message"])), \
            (error, [dotted(at) for at, _ in changes])

    check()
