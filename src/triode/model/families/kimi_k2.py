"""Kimi K2: one of mlx-lm's whole-call formats (`whole.py`) whose model writes each call's
id itself, `functions.NAME:N` with N counting the calls of the conversation from 0, and
whose template renders the id it is given: the history's call ids (and the tool outputs'
references to them) are rewritten to those before the template sees them."""

from __future__ import annotations

from .. import call_grammars
from .base import Messages
from .whole import WholeCalls


class KimiK2(WholeCalls):
    def __init__(self) -> None:
        super().__init__("kimi_k2", call_grammars.kimi_k2)

    def fit_messages(self, messages: Messages) -> Messages:
        ids: dict[str, str] = {}
        out: Messages = []
        for message in messages:
            if message.get("role") == "assistant" and message.get("tool_calls"):
                calls = []
                for call in message["tool_calls"]:
                    name = (call.get("function") or {}).get("name", "")
                    ids[call.get("id", "")] = model_id = f"functions.{name}:{len(ids)}"
                    calls.append({**call, "id": model_id})
                message = {**message, "tool_calls": calls}
            elif message.get("role") == "tool" and message.get("tool_call_id") in ids:
                message = {**message, "tool_call_id": ids[message["tool_call_id"]]}
            out.append(message)
        return out


FAMILY = KimiK2()
