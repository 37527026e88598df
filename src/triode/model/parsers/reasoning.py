"""The reasoning block in front of the reply, split off before the tool parser sees the text.

With `reasoning` on, output that opens with `<think>` (after optional whitespace) is
reasoning until `</think>` (or the model's own pair of markers, `think`: mlx-lm's
`think_start` / `think_end`, e.g. Gemma 4's `<|channel>thought` ... `<channel|>`); with `starts_in_reasoning` the rendered prompt already ended
inside `<think>\\n`, so the output is reasoning from its first token. Reasoning text is
stripped of the whitespace the template puts around it, in the deltas as in the final text,
and the whitespace after `</think>` separates it from the reply: it is not message text.
"""

from __future__ import annotations

from triode.model.parsers.base import (ParseEvent, ReasoningDelta, ReasoningDone, Step,
                                       StepMachine, ToolParser, held_marker_length)

THINK_START = "<think>"
THINK_END = "</think>"
THINK = (THINK_START, THINK_END)


class ReasoningParser(StepMachine):
    """A whole assistant turn: reasoning first, then whatever `tools` makes of the rest."""

    def __init__(self, tools: ToolParser, *, reasoning: bool, starts_in_reasoning: bool,
                 think: tuple[str, str] = THINK) -> None:
        self._tools = tools
        self._think_start, self._think_end = think
        self._buffer = ""
        self._events: list[ParseEvent] = []
        self._reasoning: list[str] = []
        self._starts_in_reasoning = starts_in_reasoning
        may_open_with_think = reasoning or starts_in_reasoning
        self._step: Step = self._opening_step if may_open_with_think else self._reply_step

    def finish(self) -> list[ParseEvent]:
        while self._step(True):
            pass
        self._events += self._tools.finish()
        return self._take_events()

    def _opening_step(self, final: bool) -> bool:
        """A leading `<think>` opens the reasoning; in a block the prompt already opened, a
        model may still write it again, and then it is markup all the same."""
        body = self._buffer.lstrip()
        if body.startswith(self._think_start):
            self._buffer = body[len(self._think_start):]
            self._step = self._reasoning_step
            return True
        if self._think_start.startswith(body) and not final:
            return False
        self._step = self._reasoning_step if self._starts_in_reasoning else self._reply_step
        return True

    def _reasoning_step(self, final: bool) -> bool:
        buffer = self._buffer if self._reasoning else self._buffer.lstrip()
        end = buffer.find(self._think_end)
        if end < 0 and not final:
            # Trailing whitespace waits: it is reasoning only if more reasoning follows.
            held = held_marker_length(buffer, (self._think_end,))
            ready = buffer[:len(buffer) - held].rstrip()
            self._reason(ready)
            self._buffer = buffer[len(ready):]
            return False
        closed = end >= 0
        self._reason((buffer[:end] if closed else buffer).rstrip())
        self._buffer = buffer[end + len(self._think_end):] if closed else ""
        if self._reasoning:
            self._events.append(ReasoningDone("".join(self._reasoning)))
        self._step = self._separator_step
        return True

    def _separator_step(self, final: bool) -> bool:
        self._buffer = self._buffer.lstrip()
        if not self._buffer:
            return False
        self._step = self._reply_step
        return True

    def _reply_step(self, final: bool) -> bool:
        if self._buffer:
            self._events += self._tools.feed(self._buffer)
            self._buffer = ""
        return False

    def _reason(self, text: str) -> None:
        if text:
            self._reasoning.append(text)
            self._events.append(ReasoningDelta(text))
