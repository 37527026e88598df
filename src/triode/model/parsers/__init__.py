"""Streaming parsers that turn an assistant turn's text into reasoning, text and tool calls.

    parser = family.parser(reasoning=..., starts_in_reasoning=..., tools=template_tools)
    for chunk in decoded_steps:
        events = parser.feed(chunk)
    events = parser.finish()

Which parser a model gets is its family's choice (`model/families`). Four tool-call formats
have parsers of their own here that stream a call's arguments while they are generated:
`hermes` (mlx-lm's `json_tools`), `mistral`, `llama3` (which mlx-lm does not infer) and
`qwen3_coder`; `generic` (triode's envelope, `model/generic_tools.py`) is streamed too and
`harmony` (gpt-oss) has its own channel parser. Every other mlx-lm format is parsed by
mlx-lm's own parser and its calls come out whole (`whole`); `plain` leaves all of the output
text. `reasoning` splits the `<think>` block off ahead of any of them. See `base` for the
events and the rule for unfinished or malformed calls.
"""

from __future__ import annotations

from triode.model.parsers.base import (ParseEvent, ReasoningDelta, ReasoningDone, TextDelta,
                                       ToolCallDelta, ToolCallDone, ToolCallStart)
from triode.model.parsers.reasoning import ReasoningParser

__all__ = [
    "ParseEvent", "ReasoningDelta", "ReasoningDone", "ReasoningParser", "TextDelta",
    "ToolCallDelta", "ToolCallDone", "ToolCallStart",
]
