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

import contextlib
import functools
import logging
import threading
import time
from typing import Any, Callable, Generator, Sequence, cast

import attrs

from . import blas, cpu_attention, lockstep, precision
from .loading import LoadOptions, ModelInfo, describe, load_model
from .pacing import CPU_MAX_CHUNK, MAX_CHUNK, PrefillPacer
from .disk_cache import LOAD_POLL_SECONDS, DiskTier
from .prompt_cache import (PROMPT_CACHE_KEY, CacheFigures, PromptCache, needs_snapshots,
                           snapshot_point, turn_close)
from .request import GenerationRequest, Sampling
from .speculative_stats import SpeculationStatistics
from .vision import Vision, load_vision, vision_config
from .window import window_caches

log = logging.getLogger(__name__)


@attrs.frozen
class Insert:
    """Starts generating `request` as sequence `uid`."""

    uid: int
    request: GenerationRequest


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
    error: str | None = None    # set on the last output when the sequence failed (its
                                # constrained decoding, its images' encoding)
    logprobs: dict[str, Any] | None = None  # OpenAI's logprob entry for this token, when asked for
    cached_tokens: int = 0      # on a sequence's first output: prompt tokens the prompt cache
                                # supplied (their prefill was skipped)
    drafted: bool = False       # an accepted draft token of speculative decoding


# How often (in steps) the engine reports speculation's figures while sequences run; it
# always does on a step where a sequence finished, and on an idle exchange.
SPECULATION_REPORT_STEPS = 16


@attrs.frozen
class Step:
    """What an engine yields after each step: its outputs, posted to the trio thread (the
    engine never waits for its actor while sequences run)."""

    outputs: list[StepOutput]
    idle: bool
    prompt_cache: CacheFigures | None = None   # the engine's prompt cache; None: off
    speculation: SpeculationStatistics | None = None   # when they changed; None: unchanged
    ranks: tuple[lockstep.RankFigures, ...] | None = None   # --distributed: every rank's
                                                            # figures, when gathered


# (this step's outputs, idle, the prompt cache's figures or None, speculation's figures
# or None: unchanged or off) -> commands
Exchange = Callable[[list[StepOutput], bool, "CacheFigures | None",
                     "SpeculationStatistics | None"], Sequence[Command]]

# An engine as the engine host steps it (model/host.py): it yields None after each piece of
# its load and a Step after each step, and is sent the commands that arrived meanwhile
# (None while it loads).
Steps = Generator["Step | None", "Sequence[Command] | None", None]

# Bytes of weights evaluated per piece of a load: a load yields between pieces, so the other
# models' steps run meanwhile (about one decode step's worth of reading at a time).
LOAD_PIECE_BYTES = 32 << 20


def watched(steps: Steps, on_step: Callable[[Step], None]) -> Steps:
    """`steps` with `on_step` called on each Step before it is yielded (a test's injected
    fault, a bench's timing); closing it closes `steps`."""
    commands: Sequence[Command] | None = None
    try:
        while True:
            step = steps.send(commands)
            if step is not None:
                on_step(step)
            commands = yield step
    except StopIteration:
        return
    finally:
        steps.close()


def sampler_for(sampling: Sampling) -> Callable[[Any], Any]:
    """The sampler for one request. Unseeded settings share one object per distinct setting,
    so a batch that shares settings samples in one batched call (BatchGenerator compares
    samplers by identity); a seeded request gets its own random key, split every step."""
    if sampling.seed is None or sampling.temperature == 0:
        return _shared_sampler(attrs.evolve(sampling, seed=None, repetition_penalty=None,
                                            presence_penalty=0.0, frequency_penalty=0.0))
    return _seeded_sampler(sampling)


@functools.lru_cache(maxsize=256)
def _shared_sampler(sampling: Sampling) -> Callable[[Any], Any]:
    from mlx_lm.sample_utils import categorical_sampling, greedy_sampler

    if sampling.temperature == 0:
        return greedy_sampler   # (as mlx-lm's make_sampler, whose filters _filtered repeats)
    return lambda logprobs: categorical_sampling(_filtered(sampling, logprobs),
                                                 sampling.temperature)


def _seeded_sampler(sampling: Sampling) -> Callable[[Any], Any]:
    import mlx.core as mx

    assert sampling.seed is not None   # sampler_for gives unseeded settings a shared sampler
    # A seed is any signed 64-bit integer (translate.RANGES); MLX's key takes an unsigned
    # one, and a negative seed would kill the engine thread.
    key = mx.random.key(sampling.seed % 2**64)

    def sample(logprobs: Any) -> Any:
        nonlocal key
        logprobs = _filtered(sampling, logprobs)
        key, step = mx.random.split(key)
        return mx.random.categorical(logprobs * (1 / sampling.temperature), key=step)

    from .speculative import one_token_per_call

    return one_token_per_call(sample)   # its key must split once per token, drafted or not


def _filtered(sampling: Sampling, logprobs: Any) -> Any:
    """top_p, min_p then top_k, in mlx-lm's order. A top_k at or past the vocabulary keeps
    every token (the request's bound is not the model's: mlx-lm's own filter raises there,
    on the engine thread)."""
    from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

    if 0 < sampling.top_p < 1:
        logprobs = apply_top_p(logprobs, sampling.top_p)
    if sampling.min_p:
        logprobs = apply_min_p(logprobs, sampling.min_p)
    if 0 < sampling.top_k < logprobs.shape[-1]:
        logprobs = apply_top_k(logprobs, sampling.top_k)
    return logprobs


def openai_penalties(presence: float, frequency: float, prompt_length: int
                     ) -> Callable[[Any, Any], Any]:
    """OpenAI's presence and frequency penalties as an mlx-lm logits processor: with c the
    number of times a token was generated so far, its logit drops by
    `presence * (c > 0) + frequency * c`.

    mlx-lm's own presence and frequency processors count the last 20 tokens of the context,
    prompt included; OpenAI counts every generated token and nothing of the prompt. The
    context a processor gets is the prompt followed by the tokens generated so far (plain
    and speculative decoding alike), so the generated ones are those past `prompt_length`."""
    import mlx.core as mx

    def penalize(tokens: Any, logits: Any) -> Any:
        generated = tokens[prompt_length:]
        if generated.size == 0:
            return logits
        counts = mx.zeros(logits.shape[-1:], dtype=mx.float32).at[generated].add(1)
        penalty = frequency * counts + presence * (counts > 0)
        return logits - penalty.astype(logits.dtype)

    return penalize


def logits_processors_for(request: GenerationRequest, tokenizer: Any) -> tuple[list[Any], Any]:
    """Penalties first, the grammar last (it must see the final logits); also returns the
    constrained-decoding processor, whose error is reported when the sequence ends."""
    processors: list[Any] = []
    sampling = request.sampling
    if sampling.repetition_penalty:
        from mlx_lm.sample_utils import make_logits_processors

        processors += make_logits_processors(repetition_penalty=sampling.repetition_penalty)
    if sampling.presence_penalty or sampling.frequency_penalty:
        processors.append(openai_penalties(sampling.presence_penalty,
                                           sampling.frequency_penalty, len(request.prompt)))
    constraint = None
    if request.grammar is not None:
        from .constraints import make_processor

        constraint = make_processor(request.grammar, tokenizer)
        processors.append(constraint)
    return processors, constraint


def logprob_entry(tokenizer: Any, token: int, logprobs: Any, top: int) -> dict[str, Any]:
    """OpenAI's {token, logprob, bytes, top_logprobs} for one sampled token."""
    import mlx.core as mx

    def described(tok: int, value: float) -> dict[str, Any]:
        text = tokenizer.decode([tok])
        return {"token": text, "logprob": value, "bytes": list(text.encode())}

    entry = described(token, logprobs[token].item())
    alternatives: list[tuple[int, float]] = []
    if top > 0:
        ids = mx.argpartition(-logprobs, kth=top - 1)[:top]
        values = cast(list[float], logprobs[ids].tolist())
        alternatives = sorted(zip(cast(list[int], ids.tolist()), values), key=lambda p: -p[1])
    entry["top_logprobs"] = [described(t, v) for t, v in alternatives]
    return entry


class _SpeculationReport:
    """When the engine reports its decode batch's speculation figures: every
    SPECULATION_REPORT_STEPS steps, on a step where a sequence finished and when it goes
    idle, if they changed (never with speculation off)."""

    def __init__(self, generator: Any, on: bool):
        self._generator = generator
        self._on = on
        self._steps = 0
        self._last: SpeculationStatistics | None = None

    def due(self, outputs: list[StepOutput], idle: bool) -> SpeculationStatistics | None:
        if not self._on:
            return None
        self._steps += 1
        if not (idle or self._steps >= SPECULATION_REPORT_STEPS
                or any(o.finish_reason is not None for o in outputs)):
            return None
        self._steps = 0
        stats: SpeculationStatistics = self._generator._generation_batch.statistics()
        if stats == self._last:
            return None
        self._last = stats
        return stats


@attrs.define
class _Sequence:
    """The engine's record of one running sequence."""

    uid: int                  # ours (the model actor's)
    generator_uid: int        # BatchGenerator's
    detokenizer: Any          # streaming detokenizer
    constraint: Any           # its constrained-decoding processor, if any
    top_logprobs: int | None  # None: no logprobs
    cached_tokens: int        # prompt tokens the prompt cache supplied, until the 1st output
    cache_namespace: str      # where its finished KV cache is kept
    snapshot_at: int | None = None   # prompt tokens prefilled (past the cached ones) at which
                                     # its untrimmable cache is kept too


# MLX never frees a stream (on a CPU each has a worker thread of its own), so the streams of
# engines that ended are kept here, per thread, for the next engine to run on.
_streams: dict[int, list[Any]] = {}
_streams_lock = threading.Lock()


def take_stream() -> Any:
    """A stream for an engine on this thread: one an ended engine gave back, else new."""
    import mlx.core as mx

    with _streams_lock:
        free = _streams.get(threading.get_ident())
        if free:
            return free.pop()
    return mx.new_stream(mx.default_device())


def give_back_stream(stream: Any) -> None:
    with _streams_lock:
        _streams.setdefault(threading.get_ident(), []).append(stream)


def evaluate_in_pieces(model: Any, piece_bytes: int = LOAD_PIECE_BYTES
                       ) -> Generator[None, Any, None]:
    """Evaluates a lazily loaded model's parameters about `piece_bytes` at a time, yielding
    after each piece (the engine host steps other models meanwhile)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    piece: list[Any] = []
    size = 0
    flat = cast(list[tuple[str, Any]], tree_flatten(model.parameters()))
    for _, array in flat:
        piece.append(array)
        size += array.nbytes
        if size >= piece_bytes:
            mx.eval(piece)
            piece, size = [], 0
            yield
    if piece:
        mx.eval(piece)


def sequence_cache(model: Any, new_cache: Callable[[], Any]) -> list[Any]:
    """A new sequence's cache: `new_cache`'s, or mlx-lm's for the model."""
    from mlx_lm.models.cache import make_prompt_cache

    return list(new_cache() or make_prompt_cache(model))


@attrs.frozen(kw_only=True)
class EngineOptions:
    """Every knob of an engine, made once from the settings (`of`) and passed whole: the
    model actor holds it and hands it to each engine it starts."""

    model: str                          # the path (or repo id) to load
    parallel: int                       # --parallel: sequences decoded together
    context_length: int | None = None   # --context-length (None: the model's own)
    blas_threads: int = 0               # 0: auto
    prompt_cache_bytes: int = 0         # 0: no prompt cache
    prefill_chunk: int = 0              # 0: the device's default
    kv_bits: int = 0                    # 0: full-precision KV cache
    speculative: str = "off"            # "ngram": prompt-lookup drafts (speculative.py)
    attention_window: int = 0           # 0: the model's own attention
    prompt_cache_dir: str | None = None   # None: no disk tier
    prompt_cache_disk_bytes: int = 0
    load_options: LoadOptions = LoadOptions()   # --tool-format, --chat-template, ...
    distributed: str = "off"            # --distributed: pipeline or tensor (lockstep.py)
    watchdog: float = 0.0               # --distributed-watchdog: seconds without a step
    distributed_control: str | None = None   # --distributed-control: rank 0's address

    @property
    def prefill_batch(self) -> int:
        """Prompts prefilled together."""
        return min(self.parallel, 8)


class Engine:
    def __init__(self, options: EngineOptions):
        self.options = options

    def run(self, exchange: Exchange, started: Callable[[ModelInfo, Any], None]) -> None:
        """Drives `steps` alone in the calling thread: `exchange` is given each step's
        figures and returns the commands (blocking while the engine is idle)."""
        steps = self.steps(started)
        commands: Sequence[Command] | None = None
        try:
            while True:
                step = steps.send(commands)
                commands = None if step is None else exchange(
                    step.outputs, step.idle, step.prompt_cache, step.speculation)
        except StopIteration:
            return
        finally:
            steps.close()

    def steps(self, started: Callable[[ModelInfo, Any], None]) -> Steps:
        """The engine as a generator: reads the model's configuration and tokenizer, calls
        `started` (requests can be rendered from then on), evaluates its weights in pieces
        (yielding None between them), then yields one Step per step and is sent the
        commands that arrived meanwhile: its first Step says it serves. Closing it ends
        the engine (its batch, its disk tier)."""
        from mlx_lm.generate import BatchGenerator

        o = self.options
        model, tokenizer, vision, weights = self._load()
        # --distributed: this rank's shard only (its other weights are never read), and
        # its side of the step records.
        group = None
        if o.distributed != "off":
            group = lockstep.join()
            lockstep.shard(model, o.distributed, group)
        hidden_size = getattr(getattr(model, "args", None), "hidden_size", None)
        threads = blas.set_threads(o.blas_threads or blas.auto_threads(hidden_size))
        cpu = precision.on_cpu()
        info = attrs.evolve(describe(o.model, model, tokenizer, o.context_length,
                                     o.load_options), blas_threads=threads,
                            vision=vision is not None, weights=weights)
        new_cache: Callable[[], Any] = lambda: None   # None: mlx-lm makes the model's own
        if o.kv_bits:
            from .kvquant import quantized_cache

            quantized_cache(model, o.kv_bits)   # refuses models it cannot serve, now
            new_cache = functools.partial(quantized_cache, model, o.kv_bits)
        elif o.attention_window:
            window_caches(model, o.attention_window)   # refuses models it cannot serve
            new_cache = functools.partial(window_caches, model, o.attention_window)
        stream = take_stream()
        # Its collectives (the figures' all_gather) go on the generator's stream, after the
        # forward pass it may still be computing (BatchGenerator evaluates ahead).
        lock = None if group is None else lockstep.Lockstep(group, stream,
                                                            o.distributed_control)
        generator: Any = BatchGenerator(   # mlx-lm's, untyped
            model,
            stop_tokens=[[t] for t in info.eos_token_ids],
            completion_batch_size=o.parallel,
            prefill_batch_size=o.prefill_batch,
            stream=stream,
        )
        disk = self._disk_tier(model, new_cache, weights) if o.prompt_cache_bytes > 0 \
            else None
        cache = PromptCache(o.prompt_cache_bytes, disk.evicted if disk is not None else None) \
            if o.prompt_cache_bytes > 0 and lock is None else None
        started(info, tokenizer)
        yield from evaluate_in_pieces(model)
        if lock is not None:   # every rank together: the seed, the cache's budget in tokens
            budget = lock.start(lockstep.kv_bytes_per_token(model, sequence_cache(
                model, new_cache)), o.prompt_cache_bytes)
            cache = PromptCache(o.prompt_cache_bytes, max_tokens=budget) if budget else None
        # Recurrent state and wrapped sliding windows cannot be trimmed back: such a model's
        # prompts are also kept where the next turn branches off (prompt_cache.snapshot_point);
        # None: not needed.
        close = None
        if cache is not None and needs_snapshots(sequence_cache(model, new_cache)):
            close = turn_close(tokenizer)
        if o.speculative == "ngram":
            from . import speculative

            # Its knee is measured by four short forward passes, one a piece (the steps'
            # timings refine it from then on).
            knee = yield from speculative.calibrating(model, tokens=16, repeats=2,
                                                      stream=stream)
            # one StepOutput per token still, in order; under --distributed rank 0 chooses
            speculative.install(generator, knee, decider=lock,
                                vocabulary=None if vision is None else vision.rows.first)
        running: dict[int, _Sequence] = {}   # our uid → its record
        by_generator: dict[int, _Sequence] = {}   # BatchGenerator's uid → the same record
        prefilling: set[int] = set()   # our uids without an output yet (prompt in progress)
        loading: dict[int, Insert] = {}   # our uid → its Insert, waiting for a disk load
        outputs: list[StepOutput] = []
        pacer = PrefillPacer(o.prefill_chunk, max_chunk=CPU_MAX_CHUNK if cpu else MAX_CHUNK)

        def start(cmd: Insert, kv: Any, reused: int) -> None:
            seq = self._insert(generator, tokenizer, cmd, kv, reused, new_cache, close,
                               vision)
            running[seq.uid] = by_generator[seq.generator_uid] = seq
            prefilling.add(seq.uid)

        def figures() -> CacheFigures | None:
            if cache is None:
                return None
            return CacheFigures(len(cache), cache.nbytes,
                                disk.figures() if disk is not None else None)

        report = _SpeculationReport(generator, o.speculative == "ngram")
        kernels = contextlib.ExitStack()   # the CPU's attention, for the engine's lifetime
        if cpu:
            kernels.enter_context(cpu_attention.routed())
        # Every rank's figures, when gathered (rank 0 reports them with its next step).
        ranks = lock.ranks if lock is not None and lock.leads else None
        try:
            while True:
                idle = not running and not loading
                commands = yield Step(outputs, idle, figures(), report.due(outputs, idle),
                                      ranks)
                ranks = None
                record = None   # rank 0's decisions for this step (--distributed)
                if lock is not None and not lock.leads:
                    record = lock.follow()
                    if record.stop:
                        return
                    commands = record.commands
                outputs = []
                reuses: list[tuple[int, int]] = []
                for cmd in commands or ():
                    if isinstance(cmd, Insert):
                        if cmd.request.images and vision is not None:
                            try:
                                cmd = vision.placed(cmd)   # image tokens → their rows' ids
                            except Exception as exc:   # this request fails, not the engine
                                log.exception("encoding a request's images failed")
                                outputs.append(StepOutput(
                                    cmd.uid, 0, "", "stop",
                                    error=f"its images could not be encoded ({exc})"))
                                continue
                        prompt = list(cmd.request.prompt)
                        namespace = cmd.request.cache_key or PROMPT_CACHE_KEY
                        kv, rest = cache.fetch(prompt, namespace) if cache is not None \
                            else (None, prompt)
                        reused = len(prompt) - len(rest)
                        reuses.append((cmd.uid, reused))
                        found = disk.find(namespace, prompt, reused) if disk is not None \
                            else None
                        if disk is not None and found is not None:
                            loading[cmd.uid] = cmd   # prefilled once the file is read back
                            disk.load(cmd.uid, *found)
                        else:
                            start(cmd, kv, reused)
                    elif cmd.uid in loading:
                        del loading[cmd.uid]   # its load's result is dropped
                    elif cmd.uid in running:
                        seq = running.pop(cmd.uid)
                        generator.remove([seq.generator_uid])
                        del by_generator[seq.generator_uid]
                        prefilling.discard(cmd.uid)
                if disk is not None and loading:
                    for done in disk.finished_loads():
                        waiting = loading.pop(done.uid, None)
                        if waiting is None:
                            continue
                        if done.kv is not None:
                            disk.counted_hit()
                            start(waiting, done.kv, done.reuse)
                        else:   # skipped: what memory has, if anything
                            prompt = list(waiting.request.prompt)
                            assert cache is not None
                            kv, rest = cache.fetch(prompt, waiting.request.cache_key
                                                   or PROMPT_CACHE_KEY)
                            start(waiting, kv, len(prompt) - len(rest))
                chunk = 0 if not running else pacer.chunk(
                    decoding=len(running) - len(prefilling),
                    prefilling=min(len(prefilling), o.prefill_batch))
                if record is not None:   # a follower: rank 0's reuse and chunk, exactly
                    if tuple(reuses) != record.reuse or bool(running) != record.run:
                        raise lockstep.Diverged(
                            f"the prompt cache gave {reuses} here and {list(record.reuse)} "
                            f"on rank 0; {len(running)} sequences run here")
                    chunk = record.chunk
                elif lock is not None and (commands or running):
                    record = lock.lead(lockstep.StepRecord(
                        tuple(commands or ()), tuple(reuses), chunk, run=bool(running)))
                if lock is not None and record is not None and record.gather:
                    lock.gather()
                    ranks = lock.ranks if lock.leads else None
                if not running:
                    if loading:
                        assert disk is not None
                        disk.wait(LOAD_POLL_SECONDS)
                    continue
                generator.prefill_step_size = chunk
                began = time.perf_counter()
                with generator.stats() as stats:
                    progress, responses = generator.next()
                took = time.perf_counter() - began
                pacer.observe(seconds=took, prompt_tokens=stats.prompt_tokens,
                              prompt_seconds=stats.prompt_time)
                if lock is not None:
                    lock.stepped(took)
                    for r in responses:
                        lock.sampled(by_generator[r.uid].uid, r.token)
                if cache is not None and close is not None:
                    self._snapshot(generator, cache, progress, by_generator)
                for r in responses:
                    seq = by_generator[r.uid]
                    prefilling.discard(seq.uid)
                    if r.finish_reason != "stop":
                        seq.detokenizer.add_token(r.token)
                    entry = None
                    if seq.top_logprobs is not None and r.finish_reason != "stop":
                        entry = logprob_entry(tokenizer, r.token, r.logprobs, seq.top_logprobs)
                    error = None
                    if r.finish_reason is not None:
                        seq.detokenizer.finalize()
                        del running[seq.uid], by_generator[r.uid]
                        if seq.constraint is not None and seq.constraint.error is not None:
                            error = f"constrained decoding failed: {seq.constraint.error}"
                        if cache is not None and r.prompt_cache is not None:
                            cache.keep(r.all_tokens, r.prompt_cache, seq.cache_namespace)
                    outputs.append(StepOutput(seq.uid, r.token, seq.detokenizer.last_segment,
                                              r.finish_reason, error, entry, seq.cached_tokens,
                                              getattr(r, "drafted", False)))
                    seq.cached_tokens = 0   # reported on the first output only
        finally:
            if lock is not None and lock.leads and not lock.broken:
                try:   # the followers end with this engine
                    lock.lead(lockstep.StepRecord(stop=True))
                except Exception as exc:
                    log.warning("--distributed: the ranks could not be told to stop (%s)", exc)
            if lock is not None:
                lock.close()
            kernels.close()
            generator.close()
            give_back_stream(stream)
            if disk is not None:
                assert cache is not None
                disk.close(cache.entries())

    def _disk_tier(self, model: Any, new_cache: Callable[[], Any], weights: str
                   ) -> DiskTier | None:
        """The prompt cache's disk tier (with --prompt-cache-dir), its index read back; None
        (logged) when the directory cannot be used: the server runs on without it."""
        o = self.options
        if o.prompt_cache_dir is None:
            return None
        from . import disk_cache

        try:
            key = disk_cache.cache_key(
                o.model, kv_bits=o.kv_bits, attention_window=o.attention_window,
                layer_types=disk_cache.layer_types(sequence_cache(model, new_cache)),
                weights=weights)
            tier = DiskTier(o.prompt_cache_dir, o.prompt_cache_disk_bytes, key,
                            pending_limit=o.prompt_cache_bytes)
            tier.open()
        except Exception as exc:   # the server serves on from memory
            log.warning("prompt cache: cannot use %s (%s); running without the disk tier",
                        o.prompt_cache_dir, exc)
            return None
        return tier

    def _load(self) -> tuple[Any, Any, Vision | None, str]:
        """The model and tokenizer; a vision model's language model (as mlx-lm's class)
        with its vision half (model/vision.py); how the weights run. An mlx-lm model's
        weights are not evaluated yet (`steps` evaluates them LOAD_PIECE_BYTES at a time)."""
        if vision_config(self.options.model) is not None:
            model, tokenizer, vision = load_vision(self.options.model)
            return model, tokenizer, vision, precision.describe(model)
        loaded = load_model(self.options.model, self.options.load_options, lazy=True)
        return loaded.model, loaded.tokenizer, None, loaded.weights

    @staticmethod
    def _snapshot(generator: Any, cache: PromptCache, progress: list[Any],
                  by_generator: dict[int, _Sequence]) -> None:
        """Keeps the caches of the sequences whose prefill just reached their snapshot point
        (the generator stops a prompt's prefill at each of its segments' ends)."""
        for p in progress:
            seq = by_generator.get(p.uid)
            if (seq is None or seq.snapshot_at is None or not p.end_of_segment
                    or p.progress[0] != seq.snapshot_at):
                continue
            seq.snapshot_at = None
            for kv, tokens in generator.extract_cache([p.uid]).values():
                cache.keep(tokens, kv, seq.cache_namespace)

    @staticmethod
    def _insert(generator: Any, tokenizer: Any, cmd: Insert, kv: Any, reused: int,
                new_cache: Callable[[], Any],
                close: tuple[int, ...] | None = None,
                vision: Vision | None = None) -> _Sequence:
        """Adds one sequence to the batch, starting from `kv`, a cache of the prompt's first
        `reused` tokens (None: from scratch); with `close` (an untrimmable cache's
        turn-closing tokens) its prefill stops once at the snapshot point to keep the cache
        there. A vision model's image tokens were replaced by their rows' ids already."""
        request = cmd.request
        extra = {}
        chain, constraint = logits_processors_for(request, tokenizer)
        if chain and request.images and vision is not None:
            chain = [vision.text_context(p) for p in chain]   # no ids past the vocabulary
        if chain:
            extra["logits_processors"] = [chain]
        prompt = list(request.prompt)
        namespace = request.cache_key or PROMPT_CACHE_KEY
        rest = prompt[reused:]
        if kv is None:
            kv = new_cache()
        point = snapshot_point(prompt, reused, close) if close is not None else None
        segments = [rest] if point is None else [rest[:point - reused], rest[point - reused:]]
        (generator_uid,) = generator.insert_segments(
            [segments], [request.max_tokens], caches=[kv], all_tokens=[prompt[:reused]],
            samplers=[sampler_for(request.sampling)], **extra)
        return _Sequence(cmd.uid, generator_uid, tokenizer.detokenizer, constraint,
                         request.top_logprobs, reused, namespace,
                         None if point is None else point - reused)
