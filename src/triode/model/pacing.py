"""How many prompt tokens the engine prefills per step while other sequences decode.

mlx-lm's `BatchGenerator` already interleaves: each `next()` runs one decode step for the
sequences that are generating, then prefills at most `prefill_step_size` tokens of each prompt
still being processed. With its default of 2,048 a long prompt that arrives while streams
decode holds every stream for the time of a 2,048-token forward pass, once per chunk: the
head-of-line stall measured in docs/benchmarks.md.

The pacer sizes that chunk from what it measures: the time of a step without prefill (the
streams' own pace) and the prefill rate in tokens/s. While sequences decode, a chunk gets
`share` of a step's time (split between the prompts being prefilled), so a stream's gap
stays near `1 + share` of its usual one; when nothing decodes, prompts are prefilled in
full-size chunks (2,048 tokens; 256 on a CPU, where smaller chunks go faster). A fixed
`--prefill-chunk` replaces the measurement.
"""

from __future__ import annotations

import attrs

MAX_CHUNK = 2048      # mlx-lm's default prefill_step_size: a prompt alone goes at full speed
# On MLX's CPU backend smaller chunks prefill faster: SmolLM2's 2,350-token prompt in float32
# went at 256 / 237 / 203 / 171 tokens/s with chunks of 256 / 512 / 1,024 / 2,048
# (bench/cpu_kernels.py; a chunk's scores and activations stay in cache).
CPU_MAX_CHUNK = 256
MIN_CHUNK = 32        # below this a forward pass costs about as much as it does with more
FIRST_CHUNK = 128     # while sequences decode and nothing has been measured yet
SHARE = 0.5           # a chunk's time as a share of a decode step's
SMOOTHING = 0.2       # weight of the newest measurement in the moving averages


def _average(old: float | None, new: float) -> float:
    return new if old is None else old + SMOOTHING * (new - old)


@attrs.define
class PrefillPacer:
    fixed: int = 0                    # --prefill-chunk: N tokens, or 0 to measure
    max_chunk: int = MAX_CHUNK        # what a prompt alone gets (CPU_MAX_CHUNK on a CPU)
    share: float = SHARE
    step_seconds: float | None = None    # moving average of a step without prefill
    prefill_rate: float | None = None    # moving average of prefill tokens per second

    def chunk(self, *, decoding: int, prefilling: int) -> int:
        """Tokens per prompt for the next step, given how many sequences are decoding and
        how many prompts are being prefilled."""
        if self.fixed:
            return self.fixed
        if not decoding:
            return self.max_chunk
        if self.step_seconds is None or self.prefill_rate is None:
            return min(FIRST_CHUNK, self.max_chunk)
        tokens = self.share * self.step_seconds * self.prefill_rate / max(1, prefilling)
        return max(MIN_CHUNK, min(self.max_chunk, int(tokens)))

    def observe(self, *, seconds: float, prompt_tokens: int, prompt_seconds: float) -> None:
        """One engine step took `seconds` in all, `prompt_seconds` of them prefilling
        `prompt_tokens` tokens."""
        if prompt_tokens and prompt_seconds > 0:
            self.prefill_rate = _average(self.prefill_rate, prompt_tokens / prompt_seconds)
        elif not prompt_tokens and seconds > 0:
            self.step_seconds = _average(self.step_seconds, seconds)
