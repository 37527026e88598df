"""The engine thread: the one thread that touches MLX.

It owns the model, the tokenizer's streaming detokenizers and an mlx-lm `BatchGenerator`.
Once per decode (or prefill) step it calls `exchange(outputs, idle)`: that hands every
sequence's new token and text to trio and brings back the commands (insert, remove) that
arrived meanwhile. While sequences run the exchange does not wait for trio (the outputs are
posted and processed there while MLX computes the next step); when no sequence is active it
blocks until work arrives, so an idle engine costs nothing. Cancelling the trio task that runs
the thread makes the next exchange raise, which ends the loop.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

import attrs

from . import blas
from .loading import ModelInfo, describe, load

log = logging.getLogger(__name__)


@attrs.frozen
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float | None = None


@attrs.frozen
class Insert:
    uid: int
    prompt: tuple[int, ...]
    max_tokens: int
    sampling: Sampling
    grammar: Any = None         # a constraints.Grammar: constrained decoding for this sequence
    top_logprobs: int | None = None   # None: no logprobs; else how many alternatives per token


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
    logprobs: dict | None = None  # OpenAI's logprob entry for this token, when asked for
    cached_tokens: int = 0      # on a sequence's first output: prompt tokens the prompt cache
                                # supplied (their prefill was skipped)


# (this step's outputs, idle, the prompt cache's (entries, bytes) or None) -> commands
Exchange = Callable[[list[StepOutput], bool, "tuple[int, int] | None"], Sequence[Command]]

PROMPT_CACHE_KEY = "model"        # one model per engine: every entry is this model's
PROMPT_CACHE_MAX_ENTRIES = 64     # distinct cached sequences (prefixes of a kept one are dropped)


def sampler_for(sampling: Sampling) -> Callable[[Any], Any]:
    """The sampler for one request. Unseeded settings share one object per distinct setting,
    so a batch that shares settings samples in one batched call (BatchGenerator compares
    samplers by identity); a seeded request gets its own random key, split every step."""
    if sampling.seed is None or sampling.temperature == 0:
        return _shared_sampler(attrs.evolve(sampling, seed=None, repetition_penalty=None))
    return _seeded_sampler(sampling)


@functools.lru_cache(maxsize=256)
def _shared_sampler(sampling: Sampling) -> Callable[[Any], Any]:
    from mlx_lm.sample_utils import make_sampler

    return make_sampler(temp=sampling.temperature, top_p=sampling.top_p,
                        min_p=sampling.min_p, top_k=sampling.top_k)


def _seeded_sampler(sampling: Sampling) -> Callable[[Any], Any]:
    import mlx.core as mx
    from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

    key = mx.random.key(sampling.seed)

    def sample(logprobs: Any) -> Any:
        nonlocal key
        if 0 < sampling.top_p < 1:
            logprobs = apply_top_p(logprobs, sampling.top_p)
        if sampling.min_p:
            logprobs = apply_min_p(logprobs, sampling.min_p)
        if sampling.top_k > 0:
            logprobs = apply_top_k(logprobs, sampling.top_k)
        key, step = mx.random.split(key)
        return mx.random.categorical(logprobs * (1 / sampling.temperature), key=step)

    return sample


def logits_processors_for(cmd: "Insert", tokenizer: Any) -> tuple[list[Any], Any]:
    """Penalties first, the grammar last (it must see the final logits); also returns the
    constrained-decoding processor, whose error is reported when the sequence ends."""
    processors: list[Any] = []
    if cmd.sampling.repetition_penalty:
        from mlx_lm.sample_utils import make_logits_processors

        processors += make_logits_processors(repetition_penalty=cmd.sampling.repetition_penalty)
    constraint = None
    if cmd.grammar is not None:
        from .constraints import make_processor

        constraint = make_processor(cmd.grammar, tokenizer)
        processors.append(constraint)
    return processors, constraint


def logprob_entry(tokenizer: Any, token: int, logprobs: Any, top: int) -> dict[str, Any]:
    """OpenAI's {token, logprob, bytes, top_logprobs} for one sampled token."""
    import mlx.core as mx

    def described(tok: int, value: float) -> dict[str, Any]:
        text = tokenizer.decode([tok])
        return {"token": text, "logprob": value, "bytes": list(text.encode())}

    entry = described(token, logprobs[token].item())
    alternatives = []
    if top > 0:
        ids = mx.argpartition(-logprobs, kth=top - 1)[:top]
        values = logprobs[ids].tolist()
        alternatives = sorted(zip(ids.tolist(), values), key=lambda p: -p[1])
    entry["top_logprobs"] = [described(t, v) for t, v in alternatives]
    return entry


class PromptCache:
    """KV caches of finished sequences, keyed by their tokens, for prompts that start the same
    way (a conversation's next turn, a shared system prompt): the engine thread's alone.

    mlx-lm's LRUPromptCache does the matching (the longest cached prefix, or a longer entry
    trimmed back to the common prefix) and the LRU eviction under `max_bytes`; this adds what
    an insert needs: at least one prompt token always goes through the model, since the
    first output token is sampled from its logits."""

    def __init__(self, max_bytes: int):
        from mlx_lm.models.cache import LRUPromptCache

        self._lru = LRUPromptCache(max_size=PROMPT_CACHE_MAX_ENTRIES, max_bytes=max_bytes)

    def fetch(self, prompt: list[int]) -> tuple[Any, list[int]]:
        """(a KV cache covering a prefix of `prompt` or None, the tokens still to prefill)."""
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        kv, rest = self._lru.fetch_nearest_cache(PROMPT_CACHE_KEY, prompt)
        if kv is not None and not rest:  # all of it cached: feed the last token again
            if not can_trim_prompt_cache(kv):
                return None, prompt
            trim_prompt_cache(kv, 1)
            rest = prompt[-1:]
        return kv, rest

    def keep(self, tokens: list[int], kv: Any) -> None:
        import mlx.core as mx

        if sum(c.nbytes for c in kv) > self._lru.max_bytes:
            return  # never fits: inserted, it would first evict every other entry
        # A finished sequence's cache is a lazy copy out of the whole batch's KV buffers:
        # evaluated now, it holds its own few KB per token instead of pinning those buffers.
        mx.eval([c.state for c in kv])
        self._lru.insert_cache(PROMPT_CACHE_KEY, list(tokens), kv)

    @property
    def nbytes(self) -> int:
        return self._lru.nbytes

    def __len__(self) -> int:
        return len(self._lru)


class Engine:
    def __init__(self, model: str, *, parallel: int, context_length: int | None,
                 blas_threads: int = 0, prompt_cache_bytes: int = 0):
        self.model_name = model
        self.parallel = parallel
        self.context_length = context_length
        self.blas_threads = blas_threads
        self.prompt_cache_bytes = prompt_cache_bytes

    def run(self, exchange: Exchange, started: Callable[[ModelInfo, Any], None]) -> None:
        import mlx.core as mx
        from mlx_lm.generate import BatchGenerator

        model, tokenizer = load(self.model_name)
        hidden_size = getattr(getattr(model, "args", None), "hidden_size", None)
        threads = blas.set_threads(self.blas_threads or blas.auto_threads(hidden_size))
        info = attrs.evolve(describe(self.model_name, model, tokenizer, self.context_length),
                            blas_threads=threads)
        stream = mx.new_stream(mx.default_device())
        generator = BatchGenerator(
            model,
            stop_tokens=[[t] for t in info.eos_token_ids],
            completion_batch_size=self.parallel,
            prefill_batch_size=min(self.parallel, 8),
            stream=stream,
        )
        cache = PromptCache(self.prompt_cache_bytes) if self.prompt_cache_bytes > 0 else None
        started(info, tokenizer)
        processors: dict[int, Any] = {}    # our uid → its constrained-decoding processor
        reused: dict[int, int] = {}        # our uid → cached prompt tokens, until its 1st output
        ours: dict[int, int] = {}          # generator uid → our uid
        theirs: dict[int, int] = {}        # our uid → generator uid
        detokenizers: dict[int, Any] = {}  # our uid → streaming detokenizer
        wants_logprobs: dict[int, int] = {}  # our uid → top_logprobs, for those that ask
        outputs: list[StepOutput] = []
        try:
            while True:
                commands = exchange(outputs, not theirs,
                                    (len(cache), cache.nbytes) if cache is not None else None)
                outputs = []
                for cmd in commands:
                    if isinstance(cmd, Insert):
                        extra = {}
                        chain, constraint = logits_processors_for(cmd, tokenizer)
                        if chain:
                            extra["logits_processors"] = [chain]
                        if constraint is not None:
                            processors[cmd.uid] = constraint
                        prompt = list(cmd.prompt)
                        kv, rest = cache.fetch(prompt) if cache is not None else (None, prompt)
                        reused[cmd.uid] = len(prompt) - len(rest)
                        (gen_uid,) = generator.insert(
                            [rest], [cmd.max_tokens], caches=[kv],
                            all_tokens=[prompt[:reused[cmd.uid]]],
                            samplers=[sampler_for(cmd.sampling)], **extra)
                        ours[gen_uid] = cmd.uid
                        if cmd.top_logprobs is not None:
                            wants_logprobs[cmd.uid] = cmd.top_logprobs
                        theirs[cmd.uid] = gen_uid
                        detokenizers[cmd.uid] = tokenizer.detokenizer
                    elif cmd.uid in theirs:
                        generator.remove([theirs[cmd.uid]])
                        del ours[theirs.pop(cmd.uid)]
                        detokenizers.pop(cmd.uid)
                        reused.pop(cmd.uid, None)
                        processors.pop(cmd.uid, None)
                        wants_logprobs.pop(cmd.uid, None)
                if not theirs:
                    continue
                _, responses = generator.next()
                for r in responses:
                    uid = ours[r.uid]
                    detok = detokenizers[uid]
                    if r.finish_reason != "stop":
                        detok.add_token(r.token)
                    error = None
                    entry = None
                    if uid in wants_logprobs and r.finish_reason != "stop":
                        entry = logprob_entry(tokenizer, r.token, r.logprobs, wants_logprobs[uid])
                    if r.finish_reason is not None:
                        wants_logprobs.pop(uid, None)
                        detok.finalize()
                        del ours[r.uid], theirs[uid], detokenizers[uid]
                        processor = processors.pop(uid, None)
                        error = processor.error if processor is not None else None
                        if cache is not None and r.prompt_cache is not None:
                            cache.keep(r.all_tokens, r.prompt_cache)
                    outputs.append(StepOutput(uid, r.token, detok.last_segment, r.finish_reason,
                                              error, entry, reused.pop(uid, 0)))
        finally:
            generator.close()
