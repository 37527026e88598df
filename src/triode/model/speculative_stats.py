"""What speculative decoding has done, as the engine reports it (no MLX here: the model
actor, `/health` and `/metrics` read these; `speculative.py` makes them)."""

from __future__ import annotations

import attrs


@attrs.frozen
class GuardStatistics:
    """The payoff guard at one batch width (docs/architecture.md, Speculative decoding)."""

    width: int                # rows in the batch
    state: str                # "on" (drafting), "off" (not drafting), "probing" (measuring again)
    windows: int              # windows judged at this width
    losses: int               # losing windows in a row so far
    ratio: float | None       # the last window's tokens per second against plain decoding's


@attrs.frozen
class SpeculationStatistics:
    """Decode steps and their tokens since the engine started (prefill is not counted)."""

    plain_steps: int = 0
    speculative_steps: int = 0   # steps that verified drafted tokens
    sequence_steps: int = 0      # steps times the rows in them (a step of 8 rows counts 8)
    tokens: int = 0              # tokens the decode steps emitted
    speculative_tokens: int = 0  # ... the speculative ones (accepted drafts included)
    drafted: int = 0             # draft tokens verified
    accepted: int = 0            # ... of them accepted (emitted)
    compactions: int = 0         # gathers that removed the KV cache's holes
    guard: tuple[GuardStatistics, ...] = ()   # by width

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Tokens a sequence gets per decode step: 1 without speculation."""
        return self.tokens / self.sequence_steps if self.sequence_steps else 0.0

    def __add__(self, other: SpeculationStatistics) -> SpeculationStatistics:
        """Two engines' figures together (the actor keeps those of engines that died); the
        guard is the later one's."""
        return SpeculationStatistics(
            self.plain_steps + other.plain_steps,
            self.speculative_steps + other.speculative_steps,
            self.sequence_steps + other.sequence_steps, self.tokens + other.tokens,
            self.speculative_tokens + other.speculative_tokens,
            self.drafted + other.drafted, self.accepted + other.accepted,
            self.compactions + other.compactions, other.guard)
