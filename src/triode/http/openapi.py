"""The OpenAPI 3.1 document of triode's own API, generated, never written by hand: its paths
are the routes mounted on the app (the url_map, `/v1` and unprefixed alike), each with the
contract its view declares (`contract.documented`); its schemas are walked from the wire
types of the request bodies and the types of the answers (schema.py).

Served at `GET /openapi.json` (and `/v1/openapi.json`) without the API key, like /health;
tests/e2e/test_openapi.py runs schemathesis against a real server with it (docs/openapi.md).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import typing
from typing import Any

import attrs
from quart import Quart, Response, current_app
from werkzeug.routing import Rule

from ..errors import ErrorBody
from ..responses.compaction import SUMMARY_MAX_TOKENS_LIMIT, THRESHOLD_MAX
from ..responses.conversations import (MAX_ITEMS_PER_CALL, ConversationUpdate,
                                       NewConversation, NewItems)
from ..responses.objects import StreamEvent
from ..responses.translate import (INCLUDES, MAX_STOP_SEQUENCES, METADATA_KEY_MAX,
                                   METADATA_MAX_ENTRIES, METADATA_VALUE_MAX, RANGES,
                                   REPETITION_PENALTY_MAX)
from ..responses.wire import (CompactRequest, ContextManagement, CreateResponse,
                              InputTokensRequest)
from .body import MAX_BODY_BYTES, json_response
from .contract import OPERATIONS, Operation, documented
from .routes import handles, route
from .schema import JSON, Refinements, Schemas

OPENAPI_VERSION = "3.1.0"
_VARIABLE = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")   # a rule's <converter:name>
_PATH_VARIABLE = re.compile(r"{([^{}]+)}")            # a path's {name}
_VARIABLE_IN_PATH = re.compile(r"{([^{}]+)}(?:/|$)")  # ... first in what is left of one

ERROR_STATUSES = {
    400: "Invalid request: `error.param` names the offending field (its JSON path).",
    401: "No API key, or the wrong one (the server was started with `--api-key`).",
    403: "An admin route without an admin key (a tenant with \"admin\": true).",
    404: "No such object.",
    405: "Not a WebSocket upgrade: this path takes no plain HTTP GET.",
    413: f"The request body is larger than {MAX_BODY_BYTES} bytes (also once decoded).",
    409: "The model is in use: it is never unloaded under a request.",
    415: "The request body's Content-Encoding is not gzip, deflate, zstd or identity.",
    429: "Too many background responses (or bytes of them) are running; retry later.",
    500: "An unexpected server error, or the model failed to load (`model_load_failed`).",
    503: "The generation queue is full, the server is shutting down, the shared store "
         "cannot be reached, or the model cannot be loaded now (with Retry-After); retry "
         "later.",
}
PATH_PARAMS = {
    "response_id": "a response's id (`resp_...`)",
    "conversation_id": "a conversation's id (`conv_...`)",
    "item_id": "an item's id",
    "model_id": "a name the `model` of a request may use",
}
# The Responses WebSocket (websocket.py): mounted on the url_map as a WebSocket rule.
WEBSOCKET = Operation(
    "Responses WebSocket mode (docs/websocket.md): upgrade, then send `response.create` "
    "frames", None, errors=(405,))


def refinements() -> Refinements:
    """What the request types cannot say and validation enforces, from its own constants."""
    metadata = {"maxProperties": METADATA_MAX_ENTRIES,
                "propertyNames": {"maxLength": METADATA_KEY_MAX},
                "additionalProperties": {"type": "string", "maxLength": METADATA_VALUE_MAX}}
    creates: Refinements = {}
    for create in (CreateResponse, InputTokensRequest):   # input_tokens takes a create's
        creates.update({(create, name): {"minimum": lo, "maximum": hi}
                        for name, (lo, hi) in RANGES.items()})
        creates.update({
            (create, "repetition_penalty"): {"exclusiveMinimum": 0,
                                             "maximum": REPETITION_PENALTY_MAX},
            (create, "max_output_tokens"): {"minimum": 1},
            (create, "max_tool_calls"): {"minimum": 0},
            (create, "truncation"): {"enum": ["auto", "disabled", None]},
            (create, "include"): {"items": {"type": "string", "enum": list(INCLUDES)}},
            (create, "stop"): {"minLength": 1, "maxItems": MAX_STOP_SEQUENCES,
                               "items": {"type": "string", "minLength": 1}},
            (create, "metadata"): metadata,
            (create, "prompt"): {"description": "a stored prompt template (--prompts-dir); "
                                 "without that flag, a 400"},
            (create, "model"): {"description": "the served model (GET /v1/models); another "
                                "name is a 400 `model_not_found`"},
        })
    return {
        **creates,
        (ContextManagement, "compact_threshold"): {"minimum": 1, "maximum": THRESHOLD_MAX},
        (CompactRequest, "keep_tokens"): {"minimum": 1},
        (CompactRequest, "max_output_tokens"): {"minimum": 1,
                                                "maximum": SUMMARY_MAX_TOKENS_LIMIT},
        (CompactRequest, "metadata"): metadata,
        (CompactRequest, "stream"): {"enum": [False, None],
                                     "description": "not accepted: /compact never streams"},
        (CompactRequest, "conversation"): {"const": None, "description": "not accepted: "
                                           "send the history in `input`"},
        (NewConversation, "items"): {"maxItems": MAX_ITEMS_PER_CALL},
        (NewConversation, "metadata"): metadata,
        (NewItems, "items"): {"maxItems": MAX_ITEMS_PER_CALL},
        (ConversationUpdate, "metadata"): metadata,
    }


def examples(model: str) -> dict[type, Any]:
    """One valid body per request type (what schemathesis' examples phase sends first)."""
    history = [{"role": "user", "content": "Say hi."}]
    return {
        CreateResponse: {"model": model, "input": "Say hi.", "max_output_tokens": 4},
        CompactRequest: {"model": model, "input": history, "max_output_tokens": 4},
        NewConversation: {"items": history, "metadata": {"topic": "greeting"}},
        NewItems: {"items": history},
        ConversationUpdate: {"metadata": {"topic": "greeting"}},
    }


def document(app: Quart, *, model: str | None = None) -> JSON:
    """The document of every route mounted on `app`; `model`: the served model's name, for
    the request examples. A route without a declared contract is an error."""
    schemas = Schemas(refinements())
    schemas.of(ErrorBody)
    bodies = examples(model) if model is not None else {}
    paths: dict[str, JSON] = {}
    answers: dict[str, Any] = {}     # operationId → its 200 answer's type
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: (r.rule, r.websocket)):
        view: Any = app.view_functions[rule.endpoint]
        operation = WEBSOCKET if rule.websocket else OPERATIONS.get(view)
        if operation is None:
            raise LookupError(f"the route {rule.rule} ({rule.endpoint}) declares no contract "
                              "(contract.documented)")
        methods = ["get"] if rule.websocket else \
            sorted(m.lower() for m in rule.methods or () if m not in ("HEAD", "OPTIONS"))
        path = _VARIABLE.sub(r"{\1}", rule.rule)
        for method in methods:
            paths.setdefault(path, {})[method] = _operation(
                rule, view, operation, schemas, bodies)
            answers[paths[path][method]["operationId"]] = operation.answer
    _link(paths, answers)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "triode",
            "version": importlib.metadata.version("triode"),
            "description": "OpenAI's Responses and Conversations APIs for a local MLX model. "
                           "Every route is mounted with and without the `/v1` prefix. "
                           "Generated from triode's routes and wire types.",
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.components.items())),
            "securitySchemes": {"apiKey": {
                "type": "http", "scheme": "bearer",
                "description": "the key the server was started with (`--api-key`); "
                               "without one, any request is let in"}},
        },
        "security": [{"apiKey": []}],
    }


def _operation(rule: Rule, view: Any, operation: Operation, schemas: Schemas,
               bodies: dict[type, Any]) -> JSON:
    out: JSON = {"operationId": rule.endpoint.split(".")[-1], "summary": operation.summary,
                 "tags": [_tag(rule.rule)]}
    doc = inspect.getdoc(view)
    if doc and not rule.websocket:
        out["description"] = " ".join(doc.split())
    parameters = [{"name": name, "in": "path", "required": True,
                   "description": PATH_PARAMS[name], "schema": {"type": "string"}}
                  for name in _VARIABLE.findall(rule.rule)]   # in order (arguments: a set)
    parameters += [{"name": p.name, "in": "query", "required": False,
                    "description": p.description, "schema": {**schemas.of(p.type), **p.bounds}}
                   for p in operation.query]
    if parameters:
        out["parameters"] = parameters
    if operation.body is not None:
        media: JSON = {"schema": schemas.of(operation.body, defaulted=operation.defaulted)}
        if operation.body in bodies:
            media["example"] = bodies[operation.body]
        out["requestBody"] = {"required": True, "content": {"application/json": media}}
    out["responses"] = _responses(rule, operation, schemas)
    if operation.public:
        out["security"] = []
    return out


def _responses(rule: Rule, operation: Operation, schemas: Schemas) -> JSON:
    responses: JSON = {}
    if rule.websocket:
        responses["101"] = {"description": "Switched to the WebSocket protocol."}
    else:
        content: JSON = {operation.media_type: {"schema": schemas.of(operation.answer)}}
        if operation.stream:
            content["text/event-stream"] = {"schema": _sse_frame(schemas)}
        responses["200"] = {"description": "OK" + (" (with `stream: true`, the event stream)"
                                                    if operation.stream else ""),
                            "content": content}
    for status, (meaning, answer) in operation.answers.items():
        responses[str(status)] = {"description": meaning,
                                  "content": {"application/json":
                                              {"schema": schemas.of(answer)}}}
    errors = {*operation.errors, 500}
    if operation.body is not None:
        errors |= {400, 413, 415}
    if not operation.public:
        errors.add(401)
    error = schemas.ref(ErrorBody.__name__) if operation.error_body is None \
        else schemas.of(operation.error_body)
    for status in sorted(errors - set(operation.answers)):
        responses[str(status)] = {"description": ERROR_STATUSES[status],
                                  "content": {"application/json": {"schema": error}}}
    return responses


def _sse_frame(schemas: Schemas) -> JSON:
    """One server-sent event as sse.py frames it (OpenAPI 3.1: an event stream's `schema` is
    one event's): `event: <type>`, then the event as JSON in `data`."""
    return {"type": "object", "required": ["event", "data"],
            "description": "One frame per typed event, `event` naming its `type`; no "
                           "`[DONE]` frame follows the last.",
            "properties": {
                "event": {"type": "string"},
                "data": {"type": "string", "contentMediaType": "application/json",
                         "contentSchema": _stream_event(schemas)}}}


def _stream_event(schemas: Schemas) -> JSON:
    """The union of the event types, as one named schema (`StreamEvent`)."""
    schemas.components.setdefault("StreamEvent", {
        "description": "One typed event of a response's stream; `type` names it.",
        **schemas.of(StreamEvent)})
    return schemas.ref("StreamEvent")


def _link(paths: dict[str, JSON], answers: dict[str, Any]) -> None:
    """OpenAPI links from each answer that names an object to the operations on it: an
    answer with an `id` (a list: its first item's) at `P` links to every operation at
    `P/{name}` and below (with no other variable), `name` taken from that id: so
    schemathesis' stateful phase can create a response or a conversation and then read,
    list, cancel and delete it."""
    for source_path, operations in paths.items():
        for source in operations.values():
            answer = answers[source["operationId"]]
            keys = typing.get_type_hints(answer) \
                if typing.is_typeddict(answer) or attrs.has(answer) else {}
            pointer = "/id" if "id" in keys else "/data/0/id" if "data" in keys else None
            if pointer is None or "200" not in source["responses"]:
                continue
            links: JSON = {}
            for target_path, targets in paths.items():
                rest = target_path.removeprefix(source_path + "/")
                named = _VARIABLE_IN_PATH.match(rest) if rest != target_path else None
                if named is None or len(_PATH_VARIABLE.findall(rest)) > 1:
                    continue   # not below the source, or with a variable no link fills
                for target in targets.values():
                    links[target["operationId"]] = {
                        "operationId": target["operationId"],
                        "parameters": {
                            named.group(1): f"$response.body#{pointer}",
                            **{name: f"$request.path.{name}"
                               for name in _PATH_VARIABLE.findall(source_path)}}}
            if links:
                source["responses"]["200"]["links"] = links


def _tag(path: str) -> str:
    first = path.removeprefix("/v1").strip("/").split("/")[0]
    return {"health": "monitoring", "metrics": "monitoring", "openapi.json": "meta"}.get(
        first, first)


@route("/openapi.json", methods=["GET"])
@documented(Operation("This document", dict[str, Any], public=True))
async def openapi_document() -> Response:
    """The OpenAPI 3.1 document of this server's API, generated from its routes and types."""
    return json_response(document(current_app, model=handles().models.default.id))
