"""Requests shaped as real agent clients send them (Codex CLI 0.171, the Agents SDK), built
from what those clients' sources and a capture of Codex's traffic show: every field they
send is accepted and does what it should, with a real server, the bundled model and the
openai SDK or raw HTTP."""

from __future__ import annotations

import gzip
import json

import zstandard

from .test_spine import MODEL, error_of, sse_events

EXEC_COMMAND = {
    "type": "function", "name": "exec_command", "strict": False,
    "description": "Runs a command in a PTY, returning output or a session ID.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                   "required": ["cmd"], "additionalProperties": False}}
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
               "format": {"type": "grammar", "syntax": "lark",
                          "definition": 'start: "*** Begin Patch" /(.|\\n)*/'}}
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
          "tools": [{"type": "function", "name": "spawn_agent", "strict": False,
                     "parameters": {"type": "object", "properties": {}}}]}


def codex_body(user_text: str, **extra) -> dict:
    """A Codex CLI turn: developer messages with ids, client_metadata, reasoning summary and
    context, encrypted reasoning, store false, a prompt_cache_key, hosted web_search."""
    return {
        "model": MODEL, "stream": True, "store": False,
        "input": [
            {"type": "message", "id": "msg_dev", "role": "developer",
             "content": [{"type": "input_text", "text": "You are a coding agent."}]},
            {"type": "message", "id": "msg_env", "role": "user",
             "content": [{"type": "input_text",
                          "text": "<environment_context><cwd>/tmp</cwd></environment_context>"}]},
            {"type": "message", "id": "msg_user", "role": "user",
             "content": [{"type": "input_text", "text": user_text}]},
        ],
        "tools": [EXEC_COMMAND, AGENTS, {"type": "web_search", "external_web_access": True}],
        "tool_choice": "auto", "parallel_tool_calls": True,
        "reasoning": {"effort": "medium", "summary": "auto", "context": "all_turns"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "01a22ec8-ef3d-7ee2-b987-dddc1a242349",
        "text": {"verbosity": "low"},
        "client_metadata": {"thread_id": "t1", "session_id": "s1", "turn_id": "u1",
                            "x-codex-turn-metadata": json.dumps({"window_number": 0})},
        **extra,
    }


def test_a_codex_turn_is_answered_and_echoes_what_it_sent(server):
    """Codex's stock turn (all its fields) streams a completed response: hosted web_search
    dropped and named, the declared tools echoed, reasoning effort/summary/context echoed."""
    r = server.http.post("/v1/responses", json=codex_body("Reply with: amber"))
    assert r.status_code == 200, r.text
    assert r.headers["X-Triode-Dropped-Tools"] == "web_search"
    events = sse_events(r.text)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    assert final["output"][-1]["content"][0]["text"] == "amber"
    assert final["store"] is False and final["prompt_cache_key"].startswith("01a22ec8")
    assert final["reasoning"] == {"effort": "medium", "summary": "auto", "context": "all_turns"}
    assert final["text"]["verbosity"] == "low"
    assert [t["name"] for t in final["tools"]] == ["exec_command", "spawn_agent"]


def test_codex_lite_tools_travel_in_an_additional_tools_item(server):
    """Codex's 'responses lite' turn has no `tools`: its tool tree comes as an
    additional_tools input item, and a tool call to a namespaced function comes back with
    the namespace and name kept apart."""
    body = codex_body("Call exec_command with cmd=ls", parallel_tool_calls=False)
    del body["tools"]
    body["input"].insert(0, {"type": "additional_tools", "id": "at_1", "role": "developer",
                             "tools": [{"type": "namespace", "name": "functions",
                                        "tools": [EXEC_COMMAND, APPLY_PATCH]},
                                       AGENTS, {"type": "web_search"}]})
    r = server.http.post("/v1/responses", json={**body, "stream": False})
    assert r.status_code == 200, r.text
    obj = r.json()
    assert r.headers["X-Triode-Dropped-Tools"] == "web_search"
    assert {t["name"] for t in obj["tools"]} == {"exec_command", "apply_patch", "spawn_agent"}
    call, = [i for i in obj["output"] if i["type"] == "function_call"]
    assert (call.get("namespace"), call["name"]) == ("functions", "exec_command")
    assert json.loads(call["arguments"]) == {"cmd": "ls"}


def test_codex_resends_the_history_with_tool_items_and_encrypted_reasoning(server):
    """store: false full-history turns (Codex's default): the previous turn's reasoning with
    its encrypted_content, a custom tool call without status and its output are accepted."""
    first = server.http.post("/v1/responses", json={**codex_body("Reply with: copper"),
                                                     "stream": False})
    assert first.status_code == 200, first.text
    output = first.json()["output"]
    body = codex_body("Reply with: done", stream=False)
    body["input"] += [*output,
                      {"type": "custom_tool_call", "id": "ctc_1", "status": "completed",
                       "call_id": "call_1", "name": "apply_patch",
                       "input": "*** Begin Patch\n*** End Patch\n"},
                      {"type": "custom_tool_call_output", "id": "ctco_1", "call_id": "call_1",
                       "output": "Exit code: 0"},
                      {"type": "message", "id": "msg_2", "role": "user",
                       "content": [{"type": "input_text", "text": "Reply with: done"}]}]
    body["tools"].append(APPLY_PATCH)
    r = server.http.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "completed"


def test_compressed_codex_bodies_are_decoded(server):
    """Bodies sent with Content-Encoding zstd or gzip get the same answer as plain ones; a
    corrupt one is a 400, an unknown coding a 415."""
    raw = json.dumps(codex_body("Reply with: violet", stream=False)).encode()
    answers = []
    for coding, packed in (("zstd", zstandard.compress(raw)), ("gzip", gzip.compress(raw))):
        r = server.http.post("/v1/responses", content=packed, headers={
            "Content-Type": "application/json", "Content-Encoding": coding})
        assert r.status_code == 200, (coding, r.text)
        answers.append(r.json()["output"][-1]["content"][0]["text"])
    assert answers == ["violet", "violet"]
    bad = server.http.post("/v1/responses", content=zstandard.compress(raw)[:-4], headers={
        "Content-Type": "application/json", "Content-Encoding": "zstd"})
    assert bad.status_code == 400 and "zstd" in error_of(bad)["message"]
    unknown = server.http.post("/v1/responses", content=raw, headers={
        "Content-Type": "application/json", "Content-Encoding": "br"})
    assert unknown.status_code == 415


def test_a_field_no_client_sends_is_still_a_400_naming_it(server):
    """Accepting is per field, on evidence: an unknown top-level or nested field is a 400."""
    r = server.http.post("/v1/responses", json=codex_body("x", stream=False, telepathy=True))
    assert r.status_code == 400 and error_of(r)["param"] == "telepathy"
    body = codex_body("x", stream=False)
    body["reasoning"]["depth"] = 3
    r = server.http.post("/v1/responses", json=body)
    assert r.status_code == 400 and error_of(r)["param"] == "reasoning.depth"


def test_models_list_retrieve_and_codex_catalog(server, client):
    """/v1/models is OpenAI's list (with the context window); /v1/models/{id} finds any
    accepted name and 404s others; with ?client_version (Codex's model_catalog_url fetch)
    the list is Codex's catalog shape, which its parser needs (slug, reasoning levels,
    shell type, truncation policy, context window...)."""
    listed = client.models.list().data
    assert [m.id for m in listed] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    assert server.http.get("/v1/models").json()["data"][0]["context_window"] == 4096
    missing = server.http.get("/v1/models/gpt-9")
    assert missing.status_code == 404 and error_of(missing)["code"] == "model_not_found"
    catalog = server.http.get("/v1/models", params={"client_version": "0.171.0"}).json()
    entry, = catalog["models"]
    assert entry["slug"] == MODEL and entry["context_window"] == 4096
    for field in ("display_name", "supported_reasoning_levels", "shell_type", "visibility",
                  "supported_in_api", "priority", "support_verbosity", "truncation_policy",
                  "experimental_supported_tools", "base_instructions"):
        assert field in entry, field


def test_an_unknown_previous_response_is_previous_response_not_found(server):
    """OpenAI's code for an unknown previous_response_id, which Codex's WebSocket client
    reads to resend its whole history."""
    r = server.http.post("/v1/responses", json={"model": MODEL, "input": "x",
                                                "previous_response_id": "resp_gone"})
    assert r.status_code == 400
    assert error_of(r)["code"] == "previous_response_not_found"
    assert error_of(r)["param"] == "previous_response_id"


def test_a_tool_output_must_answer_a_call_of_the_history(server):
    """A function_call_output or custom_tool_call_output whose call_id matches no call in
    the rendered history is a 400 naming `input[i].call_id` (as OpenAI answers); one that
    answers a call of the input, or of the previous_response_id chain, is accepted."""
    for kind in ("function_call_output", "custom_tool_call_output"):
        r = server.http.post("/v1/responses", json={"model": MODEL, "input": [
            {"role": "user", "content": "Reply with: a"},
            {"type": kind, "call_id": "call_missing", "output": "x"}]})
        assert r.status_code == 400, r.text
        assert error_of(r)["param"] == "input[1].call_id"
        assert "call_missing" in error_of(r)["message"]
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather",
            "arguments": '{"city": "Paris"}'}
    answered = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    r = server.http.post("/v1/responses", json={"model": MODEL, "max_output_tokens": 4,
                                                "input": [call, answered]})
    assert r.status_code == 200, r.text
    first = server.http.post("/v1/responses", json={"model": MODEL, "max_output_tokens": 4,
                                                    "input": [call]}).json()
    r = server.http.post("/v1/responses", json={
        "model": MODEL, "max_output_tokens": 4, "previous_response_id": first["id"],
        "input": [answered]})
    assert r.status_code == 200, r.text
