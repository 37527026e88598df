"""What the family tests share: a turn parsed by a family, and the tools they force."""

from __future__ import annotations

import json
from typing import Any

from triode.model.families import Family
from triode.model.parsers import TextDelta, ToolCallDone

WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
    "additionalProperties": False}}
CHAT_WEATHER = {"type": "function", "function": {"name": "get_weather",
                                                 "parameters": WEATHER["parameters"]}}


def parsed(family: Family, text: str, **flags: Any) -> tuple[str, list[tuple[str, Any]]]:
    """(the text, the (name, arguments) calls) a family's parser makes of one turn."""
    parser = family.parser(reasoning=flags.pop("reasoning", False),
                           starts_in_reasoning=False, tools=[CHAT_WEATHER], **flags)
    events = parser.feed(text) + parser.finish()
    return ("".join(e.text for e in events if isinstance(e, TextDelta)),
            [(e.name, json.loads(e.arguments)) for e in events if isinstance(e, ToolCallDone)])


def template(messages: list[dict[str, Any]], tools: Any) -> str:
    """A chat template that shows what it was given."""
    return "|".join(f"{m['role']}:{m.get('content')}" for m in messages) + f"|tools:{tools}"
