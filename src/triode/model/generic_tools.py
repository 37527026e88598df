"""Tools for a model whose chat template has none: triode's `generic` envelope (docs/tools.md).

Such a template renders messages and nothing else, so triode writes the tools into the
messages before the template sees them (`present`), and the template is given no `tools`:

- the request's tools go into the system prompt: an instruction, each tool's signature as
  one line of JSON between `<tools>` and `</tools>`, and the envelope. They follow the leading
  system message's text after a blank line, or make a system message at the start;
  `templates.fit_roles` then moves it where the template takes it (the first user message,
  for a template that refuses `system`).
- a past assistant turn's calls become its text: its content, then one block per call,
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, blocks joined by a
  newline: what a forced call writes (`constraints.tool_call_grammar`), so a turn re-renders
  as it was generated and the prompt cache keeps matching.
- tool outputs become user messages: each output between `<tool_response>\\n` and
  `\\n</tool_response>`, consecutive outputs in one message, one block each. A user message
  is what every template renders (many refuse a `tool` role, or one they do not know), and
  the `<tool_response>` wrapper is the one models trained on Hermes-style calls know.

The parser (`parsers.generic`) reads these blocks back, and a JSON list of calls in one
block as well.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from .parsers.hermes import CALL_END, CALL_START

RESPONSE_START, RESPONSE_END = "<tool_response>", "</tool_response>"
TOOLS_START, TOOLS_END = "<tools>", "</tools>"

# Measured on SmolLM2-135M-Instruct against Hermes's (Qwen 2.5's) wording and SmolLM2's own
# training prompt (docs/tools.md): its preamble, without that prompt's "refuse to answer" and
# "NO other text", and with one block per call.
INSTRUCTION = (
    "You are given a question and a set of possible functions. Based on the question, make "
    "one or more function calls if they help; otherwise answer directly.\n"
    "You have access to the following tools:\n"
    "{tools}\n"
    "To call a function, reply with only the call, in this format, one block per call:\n"
    f'{CALL_START}\n{{"name": "func_name1", "arguments": {{"argument1": "value1", '
    f'"argument2": "value2"}}}}\n{CALL_END}')

Messages = list[dict[str, Any]]


def _json(value: Any) -> str:
    # The layout of forced JSON (`call_grammars.JSON_LAYOUT`) and of the parser's arguments.
    return json.dumps(value, ensure_ascii=False)


def tools_text(tools: Sequence[dict[str, Any]]) -> str:
    """The system prompt's part that shows the model its tools and how to call them."""
    lines = "\n".join(_json(tool) for tool in tools)
    return INSTRUCTION.replace("{tools}", f"{TOOLS_START}\n{lines}\n{TOOLS_END}")


def call_text(name: str, arguments: Any) -> str:
    """One call as the model writes it: `arguments` a mapping (a string that is not JSON,
    as a client may send it, stays that string)."""
    return f'{CALL_START}\n{{"name": {_json(name)}, "arguments": {_json(arguments)}}}\n{CALL_END}'


def _assistant(message: dict[str, Any]) -> dict[str, Any]:
    functions = [call.get("function") or {} for call in message["tool_calls"]]
    calls = [call_text(f.get("name", ""), f.get("arguments", {})) for f in functions]
    text = message.get("content") or ""
    shown = {k: v for k, v in message.items() if k != "tool_calls"}
    shown["content"] = "\n".join([text, *calls] if text else calls)
    return shown


def _wrapped(content: Any) -> Any:
    """A tool output in its wrapper: text, or a content list (images) kept in order."""
    if isinstance(content, list):
        return [{"type": "text", "text": f"{RESPONSE_START}\n"}, *content,
                {"type": "text", "text": f"\n{RESPONSE_END}"}]
    return f"{RESPONSE_START}\n{content or ''}\n{RESPONSE_END}"


def _parts(content: Any) -> list[Any]:
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def _joined(first: Any, second: Any) -> Any:
    """Two contents in one message, a newline between them."""
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n{second}"
    return [*_parts(first), {"type": "text", "text": "\n"}, *_parts(second)]


def present(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
            ) -> Messages:
    """`messages` with the tools, the past calls and the tool outputs written into them as
    the module says; the input is not changed."""
    out: Messages = []
    tool_output = False    # the last message made is tool outputs
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            out.append(_assistant(message))
        elif role == "tool":
            wrapped = _wrapped(message.get("content"))
            if tool_output:
                out[-1] = {**out[-1], "content": _joined(out[-1]["content"], wrapped)}
            else:
                out.append({"role": "user", "content": wrapped})
            tool_output = True
            continue
        else:
            out.append(dict(message))
        tool_output = False
    if tools:
        text = tools_text(tools)
        if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
            system = out[0]["content"]
            out[0] = {**out[0], "content": f"{system}\n\n{text}" if system else text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out
