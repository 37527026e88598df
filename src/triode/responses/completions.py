"""OpenAI's legacy Completions API (`POST /v1/completions`: a plain prompt, no chat
template) as a translation onto a create (pure code).

The body becomes a `RawPrompt`: a `CreateResponse` (never stored) whose prompt the turn
service tokenizes as it is instead of rendering a chat (`Preparer.prepare`), and whose
output is read as plain text (no tool calls, no reasoning markers). The answer is a
`text_completion`, or its chunks, read back from the response (docs/compatibility.md).
"""

from __future__ import annotations

from typing import Any, Union

import attrs

from ..errors import InvalidRequest
from .chat import ChatStreamOptions, chat_usage
from .convert import structure
from .objects import (MessageItem, OutputTextPart, ResponseEvent, ResponseObject,
                      StreamEvent, TextDeltaEvent)
from .wire import CreateResponse

DEFAULT_MAX_TOKENS = 16   # OpenAI's, for this API


@attrs.frozen(kw_only=True)
class CompletionRequest:
    """A Completions body: every field the `openai` package's `CompletionCreateParams`
    defines, plus the extra sampling fields `/v1/responses` takes."""

    model: str
    prompt: Any                    # a string, or token ids (checked by `_prompt`)
    best_of: int | None = None
    echo: bool | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    logprobs: int | None = None
    max_tokens: int | None = None
    n: int | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    stop: Union[str, list[str], None] = None
    stream: bool | None = None
    stream_options: ChatStreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    keep_alive: Union[str, float, None] = None


@attrs.frozen(kw_only=True)
class RawPrompt(CreateResponse):
    """A create whose prompt is `raw_prompt` as it stands (text, or token ids)."""

    raw_prompt: Union[str, list[int]] = ""


@attrs.frozen
class Translated:
    create: RawPrompt
    echo: bool
    logprobs: int | None
    include_usage: bool


def _prompt(value: Any) -> str | list[int]:
    """One prompt: a string, or token ids; a list of one of those is that one."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]
    if isinstance(value, str):
        if not value:
            raise InvalidRequest("'prompt' must not be empty", param="prompt")
        return value
    if isinstance(value, list) and value and all(
            isinstance(t, int) and not isinstance(t, bool) for t in value):
        return list(value)
    if isinstance(value, list) and len(value) > 1:
        raise InvalidRequest("one prompt per request: send the others as requests of their "
                             "own", param="prompt")
    raise InvalidRequest("'prompt' must be a non-empty string or a list of token ids",
                         param="prompt")


def to_create(body: Any) -> Translated:
    req: CompletionRequest = structure(body, CompletionRequest)
    for field, value in (("n", req.n), ("best_of", req.best_of)):
        if value not in (None, 1):
            raise InvalidRequest(f"{field} must be 1: this server generates one completion "
                                 "per request", param=field)
    if req.suffix:
        raise InvalidRequest("suffix (insertion) is not supported", param="suffix")
    if req.logit_bias:
        raise InvalidRequest("logit_bias is not supported", param="logit_bias")
    if req.logprobs is not None and not 0 <= req.logprobs <= 5:
        raise InvalidRequest("logprobs must be from 0 to 5", param="logprobs")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise InvalidRequest("max_tokens must be at least 1", param="max_tokens")
    prompt = _prompt(req.prompt)
    if req.echo and not isinstance(prompt, str):
        raise InvalidRequest("echo needs a text prompt (not token ids)", param="echo")
    max_tokens = DEFAULT_MAX_TOKENS if req.max_tokens is None else req.max_tokens
    create = {
        "model": req.model, "input": prompt if isinstance(prompt, str) else "(token ids)",
        "store": False, "max_output_tokens": max_tokens,
        "stream": req.stream, "temperature": req.temperature, "top_p": req.top_p,
        "seed": req.seed, "stop": req.stop, "presence_penalty": req.presence_penalty,
        "frequency_penalty": req.frequency_penalty, "user": req.user,
        "top_logprobs": req.logprobs if req.logprobs is not None else None,
        "include": ["message.output_text.logprobs"] if req.logprobs is not None else None,
        "top_k": req.top_k, "min_p": req.min_p, "repetition_penalty": req.repetition_penalty,
        "keep_alive": req.keep_alive,
    }
    base: CreateResponse = structure({k: v for k, v in create.items() if v is not None},
                                     CreateResponse)
    translated = RawPrompt(**{f.name: getattr(base, f.name)
                              for f in attrs.fields(CreateResponse)}, raw_prompt=prompt)
    return Translated(translated, bool(req.echo), req.logprobs,
                      bool(req.stream_options and req.stream_options.include_usage))


def completion_id(response_id: str) -> str:
    return "cmpl-" + response_id.removeprefix("resp_")


def _finish(obj: ResponseObject) -> str:
    return "length" if obj.status == "incomplete" else "stop"


def legacy_logprobs(entries: list[dict[str, Any]], offset: int) -> dict[str, Any]:
    """Chat-style logprob entries in the Completions API's older shape."""
    tokens, offsets, at = [], [], offset
    for e in entries:
        tokens.append(e["token"])
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": tokens, "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e.get("top_logprobs", [])}
                             for e in entries],
            "text_offset": offsets}


def text_completion(obj: ResponseObject, t: Translated, prompt_text: str) -> dict[str, Any]:
    text, entries = "", []
    for item in obj.output:
        if isinstance(item, MessageItem):
            for part in item.content:
                if isinstance(part, OutputTextPart):
                    text += part.text
                    entries += part.logprobs or []
    shown = prompt_text + text if t.echo else text
    return {"id": completion_id(obj.id), "object": "text_completion",
            "created": obj.created_at, "model": obj.model,
            "choices": [{"text": shown, "index": 0, "finish_reason": _finish(obj),
                         "logprobs": legacy_logprobs(entries, len(shown) - len(text))
                         if t.logprobs is not None else None}],
            "usage": chat_usage(obj.usage), "system_fingerprint": None}


class CompletionChunks:
    """A response's events as Completions chunks (the prompt first with `echo`), the last
    with the finish reason, then the usage chunk when asked."""

    def __init__(self, t: Translated, prompt_text: str) -> None:
        self._t = t
        self._prompt = prompt_text
        self._base: dict[str, Any] | None = None
        self._offset = len(prompt_text) if t.echo else 0

    def _chunk(self, text: str, finish: str | None = None,
               entries: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        assert self._base is not None
        logprobs = legacy_logprobs(entries or [], self._offset) \
            if self._t.logprobs is not None and entries is not None else None
        self._offset += len(text)
        return {**self._base, "choices": [{"text": text, "index": 0, "finish_reason": finish,
                                           "logprobs": logprobs}],
                **({"usage": None} if self._t.include_usage else {})}

    def feed(self, event: StreamEvent) -> list[dict[str, Any]]:
        out = []
        if isinstance(event, ResponseEvent):
            obj = event.response
            if event.type == "response.created":
                self._base = {"id": completion_id(obj.id), "object": "text_completion",
                              "created": obj.created_at, "model": obj.model,
                              "system_fingerprint": None}
                if self._t.echo:
                    self._offset = 0
                    out.append(self._chunk(self._prompt))
            elif event.type in ("response.completed", "response.incomplete"):
                out.append(self._chunk("", _finish(obj)))
                if self._t.include_usage and self._base is not None:
                    out.append({**self._base, "choices": [], "usage": chat_usage(obj.usage)})
        elif isinstance(event, TextDeltaEvent) and event.type == "response.output_text.delta":
            out.append(self._chunk(event.delta, entries=event.logprobs or []))
        return out
