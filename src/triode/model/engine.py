"""The engine thread: the one thread that touches MLX.

It owns the model, the tokenizer's streaming detokenizers and an mlx-lm `BatchGenerator`.
Once per decode (or prefill) step it crosses back to trio with a single
`trio.from_thread.run(exchange, outputs, idle)` call: that hands over every sequence's new
token and text, and brings back the commands (insert, remove) that arrived meanwhile. When no
sequence is active the exchange blocks in trio until work arrives, so an idle engine costs
nothing. Cancelling the trio task that runs the thread makes the next exchange raise
`trio.Cancelled` here, which ends the loop.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

import attrs

from .loading import ModelInfo, describe, load

log = logging.getLogger(__name__)


@attrs.frozen
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0


@attrs.frozen
class Insert:
    uid: int
    prompt: tuple[int, ...]
    max_tokens: int
    sampling: Sampling
    grammar: Any = None         # a constraints.Grammar: constrained decoding for this sequence


@attrs.frozen
class Remove:
    uid: int


Command = Insert | Remove


@attrs.frozen
class StepOutput:
    """One sequence's result of one step."""

    uid: int
    token: int
    text: str                   # newly decodable text (UTF-8 safe; may be empty)
    finish_reason: str | None   # "stop" (end of sequence), "length" (max tokens), or None
    error: str | None = None    # set on the last output when constrained decoding failed


Exchange = Callable[[list[StepOutput], bool], Sequence[Command]]


@functools.lru_cache(maxsize=256)
def sampler_for(sampling: Sampling) -> Callable[[Any], Any]:
    """One sampler object per distinct setting, so a batch that shares settings samples in
    one batched call (BatchGenerator compares samplers by identity)."""
    from mlx_lm.sample_utils import make_sampler

    return make_sampler(temp=sampling.temperature, top_p=sampling.top_p,
                        min_p=sampling.min_p, top_k=sampling.top_k)


class Engine:
    def __init__(self, model: str, *, parallel: int, context_length: int | None):
        self.model_name = model
        self.parallel = parallel
        self.context_length = context_length

    def run(self, exchange: Exchange, started: Callable[[ModelInfo, Any], None]) -> None:
        import mlx.core as mx
        from mlx_lm.generate import BatchGenerator

        model, tokenizer = load(self.model_name)
        info = describe(self.model_name, model, tokenizer, self.context_length)
        stream = mx.new_stream(mx.default_device())
        generator = BatchGenerator(
            model,
            stop_tokens=[[t] for t in info.eos_token_ids],
            completion_batch_size=self.parallel,
            prefill_batch_size=min(self.parallel, 8),
            stream=stream,
        )
        started(info, tokenizer)
        processors: dict[int, Any] = {}    # our uid → its constrained-decoding processor
        ours: dict[int, int] = {}          # generator uid → our uid
        theirs: dict[int, int] = {}        # our uid → generator uid
        detokenizers: dict[int, Any] = {}  # our uid → streaming detokenizer
        outputs: list[StepOutput] = []
        try:
            while True:
                commands = exchange(outputs, not theirs)
                outputs = []
                for cmd in commands:
                    if isinstance(cmd, Insert):
                        extra = {}
                        if cmd.grammar is not None:
                            from .constraints import make_processor

                            processors[cmd.uid] = make_processor(cmd.grammar, tokenizer)
                            extra["logits_processors"] = [[processors[cmd.uid]]]
                        (gen_uid,) = generator.insert(
                            [list(cmd.prompt)], [cmd.max_tokens],
                            samplers=[sampler_for(cmd.sampling)], **extra)
                        ours[gen_uid] = cmd.uid
                        theirs[cmd.uid] = gen_uid
                        detokenizers[cmd.uid] = tokenizer.detokenizer
                    elif cmd.uid in theirs:
                        generator.remove([theirs[cmd.uid]])
                        del ours[theirs.pop(cmd.uid)]
                        detokenizers.pop(cmd.uid)
                        processors.pop(cmd.uid, None)
                if not theirs:
                    continue
                _, responses = generator.next()
                for r in responses:
                    uid = ours[r.uid]
                    detok = detokenizers[uid]
                    if r.finish_reason != "stop":
                        detok.add_token(r.token)
                    error = None
                    if r.finish_reason is not None:
                        detok.finalize()
                        del ours[r.uid], theirs[uid], detokenizers[uid]
                        processor = processors.pop(uid, None)
                        error = processor.error if processor is not None else None
                    outputs.append(StepOutput(uid, r.token, detok.last_segment, r.finish_reason,
                                              error))
        finally:
            generator.close()
