"""Prompt-lookup speculative decoding inside mlx-lm's batched generation
(docs/architecture.md, docs/benchmarks.md).

No draft model: a sequence's draft is what followed the most recent earlier occurrence of its
last few tokens in its own prompt and output (an edit, a quote, code being rewritten repeat
long runs of the prompt). One forward pass per step verifies every row's draft at once.

It lives in `SpeculativeBatch`, a `GenerationBatch` (mlx-lm's decode-phase batch) that
`install` puts into a `BatchGenerator`: the generator still prefills, joins and removes
sequences; only its decode step changes. A step with no draft worth its cost (`plan`: each
row's acceptance estimate against the model's fixed and per-token step costs, calibrated at
start and refined from the steps' timings) is mlx-lm's own pipelined single-token step, so
speculation costs next to nothing where there is nothing to copy; after EXPLORE_EVERY plain
steps, rows with a draft on offer draft one token anyway, to keep those estimates measured.

**Row state.** mlx-lm keeps per row the tokens in the KV cache (`tokens[i]`) and one sampled
token `x` not yet fed (`_next_tokens[i]`, emitted by the step that feeds it). A speculative
step feeds each row `[x] + draft`, right-padded to the batch's longest row, emits x and the
accepted draft tokens, and samples the next x.

**KV cache with holes.** mlx-lm's `BatchKVCache` has one write position for the whole batch:
every row gets the step's full width, but rows accept different numbers of draft tokens.
Trimming every row back to the fewest accepted ("lockstep") makes the batch only as fast as
its slowest row and re-feeds the others' tokens; rolling each row into place copies the whole
cache every step. Here the rejected and padding positions stay in the cache as holes:
`HoleyKVCache` (a `BatchKVCache`) masks them out of attention and each row's RoPE offset
counts only its kept tokens, so every row advances by exactly what it accepted and each
position's keys are those plain decoding would compute. When holes make up a quarter of the
cache, one gather compacts it. Batches with other caches (rotating, quantized) do not
speculate.

**Exactness.** Each verified position is sampled with the row's own sampler from the same
(processed) distribution plain decoding would use there, and a draft token is accepted iff it
equals that sample; the first mismatch's sample is the correction, a fully accepted draft's
next sample the bonus. With a point-mass draft this is speculative sampling's rule exactly:
token d is accepted with probability p(d); on rejection the sample is distributed as p with d
removed and renormalised. Greedy decoding is the argmax, so the output is identical to plain
decoding's; a seeded sampler is called once per emitted token in order, as plain decoding
calls it, so a seed gives the same tokens with or without speculation. Rows with logits
processors (grammars, repetition penalties) never draft.

**Several ranks** (`--distributed`, model/lockstep.py). Whether a step speculates, and with
which drafts, is decided from timings (the step-cost fit, the guard) that each rank would
measure on its own. So only rank 0 decides: each decode step's choice (plain, or every row's
draft) goes to the other ranks through `Decider.decide`, and they take it as it is; the
exact verification then makes the same tokens on every rank.
"""

from __future__ import annotations

import dataclasses
import importlib
import statistics
import weakref
from collections import deque
from typing import Any, Callable, Generator, Protocol, Sequence, cast

import attrs
import mlx.core as mx

from .speculative_stats import GuardStatistics, SpeculationStatistics

# mlx-lm's classes, untyped: subclassed and called as Any.
_generate = importlib.import_module("mlx_lm.generate")
_cache = importlib.import_module("mlx_lm.models.cache")
GenerationBatch: Any = _generate.GenerationBatch
BatchKVCache: Any = _cache.BatchKVCache
KVCache: Any = _cache.KVCache
greedy_sampler: Any = _generate.greedy_sampler

NGRAM_SIZES = (3, 2)      # the suffix lengths looked up, longest first
MAX_DRAFT = 8             # draft tokens per row and step
FIRST_DRAFT = 4           # a row's draft length until its acceptance adapts it
MISSES_BEFORE_PAUSE = 2   # drafts in a row with nothing accepted before drafting pauses
FIRST_PAUSE = 4           # steps; doubles on each pause with no acceptance between
MAX_PAUSE = 64
PRIOR_ACCEPTANCE = 0.75   # a row's per-token acceptance estimate before it has drafted
ACCEPTANCE_MEMORY = 0.8   # decay of its acceptance counts per draft
PLAIN_ADVANTAGE = 1.25    # plain steps overlap the host's work with MLX's, speculative ones
                          # wait for their tokens, and acceptance estimates run optimistic:
                          # a speculative step must promise this much more
MAX_SKIP = 8              # plain steps without even looking for drafts, after looks that
                          # found none worth a step (doubling from 1): lookups cost CPU too
EXPLORE_EVERY = 32        # plain steps in a row after which a row with a draft on offer
                          # drafts one token anyway: acceptance and step costs stay measured
COST_MEMORY = 0.97        # decay per observed step of the step-cost fit's sums
COST_MIN_WEIGHT = 16.0    # observations (decayed) before the fit replaces the calibration
COST_FIT_DOWN = 4.0       # ... within these factors below and above the calibrated knee
COST_FIT_UP = 1.5         # (noisy timings that overstate the knee make speculation slower)
MAX_KNEE = 1024.0
GUARD_WINDOW = 16         # speculative steps (in whole runs) a guard's verdict is judged on
GUARD_PLAIN = 32          # plain steps of the same width whose median time is the reference
GUARD_LOSS = 0.9          # a window below this share of plain decoding's rate is a loss
GUARD_LOSSES = 3          # losing windows in a row before drafting stops at that width
GUARD_PROBE_EVERY = 256   # plain steps (of that width) while off before a probe window
GUARD_PROBE_MAX = 4096    # ... doubling while probes lose
COMPACT_SHARE = 0.25      # holes, as a share of the cache's positions, that trigger compaction
COMPACT_MIN = 32          # ... once there are at least this many

# Samplers that keep per-sequence random state (a seeded request's key): called one position
# at a time, once per emitted token, exactly as plain decoding calls them.
_sequential: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


def one_token_per_call(sampler: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Marks `sampler` as stateful: speculation calls it once per position, in order."""
    _sequential.add(sampler)
    return sampler


class NgramIndex:
    """A sequence's tokens and, for each n in NGRAM_SIZES, where each n-gram last ended."""

    def __init__(self, tokens: Sequence[int], vocabulary: int | None = None):
        self.tokens: list[int] = list(tokens)
        # Ids at or past it (a vision model's image rows, model/vision.py) are never
        # sampled: a proposal ends before one.
        self.vocabulary = vocabulary
        self._last_end: dict[tuple[int, ...], int] = {}
        self._indexed = 0   # n-grams ending at or before this position are in _last_end

    def catch_up(self, tokens: list[int]) -> None:
        """Appends what of `tokens` (which only ever grows) it does not hold yet."""
        if len(self.tokens) < len(tokens):
            self.tokens += tokens[len(self.tokens):]

    def propose(self, k: int) -> list[int]:
        """`k` tokens that followed the latest earlier occurrence of the suffix (longest
        first of NGRAM_SIZES), or none."""
        tokens, end = self.tokens, len(self.tokens)
        if k <= 0 or end < 2:
            return []
        for e in range(self._indexed + 1, end):   # every n-gram ending before the suffix
            for n in NGRAM_SIZES:
                if e >= n:
                    self._last_end[tuple(tokens[e - n:e])] = e
        self._indexed = max(self._indexed, end - 1)
        for n in NGRAM_SIZES:
            if end > n:
                start = self._last_end.get(tuple(tokens[end - n:]))
                if start is not None:
                    # What followed runs into the suffix itself in a repeating stretch: the
                    # proposal then continues its period.
                    period = end - start
                    return self._sampleable([tokens[start + j % period] for j in range(k)])
        return []

    def _sampleable(self, proposal: list[int]) -> list[int]:
        if self.vocabulary is None:
            return proposal
        for i, token in enumerate(proposal):
            if token >= self.vocabulary:
                return proposal[:i]
        return proposal


@attrs.define
class _Row:
    """Speculation's record of one sequence of the batch."""

    index: NgramIndex
    draft_len: int = FIRST_DRAFT
    misses: int = 0      # consecutive drafts with nothing accepted
    paused: int = 0      # steps left without drafting
    pause: int = FIRST_PAUSE
    hits: float = PRIOR_ACCEPTANCE   # decayed counts of accepted / verified draft tokens
    tries: float = 1.0

    @property
    def acceptance(self) -> float:
        return self.hits / self.tries

    def adapt(self, drafted: int, accepted: int) -> None:
        self.hits = ACCEPTANCE_MEMORY * self.hits + accepted
        self.tries = ACCEPTANCE_MEMORY * self.tries + accepted + (accepted < drafted)
        if accepted == drafted:
            self.draft_len = min(MAX_DRAFT, self.draft_len + 2)
        else:
            self.draft_len = max(1, accepted + 1)
        if accepted:
            self.misses, self.pause = 0, FIRST_PAUSE
            return
        self.misses += 1
        if self.misses >= MISSES_BEFORE_PAUSE:
            self.misses, self.paused = 0, self.pause
            self.pause = min(MAX_PAUSE, self.pause * 2)


def expected_accepted(acceptance: float, draft: int) -> float:
    """Draft tokens accepted on average when each is accepted with this probability."""
    if acceptance >= 1.0:
        return float(draft)
    return acceptance * (1 - acceptance ** draft) / (1 - acceptance)


def plan(offers: list[int], acceptance: list[float], knee: float,
         advantage: float = PLAIN_ADVANTAGE) -> list[int]:
    """Each row's draft length (at most its `offers`) for the step that promises the most
    tokens per unit of time; all 0 when a plain step does.

    A row of the step feeds its unfed token and its draft; every row is padded to the longest.
    A forward pass over N tokens is taken to cost `knee + N` (in units of one token's marginal
    cost): `knee` is the fixed cost of a step. A speculative step must promise `advantage`
    times a plain step's rate."""
    rows = len(offers)
    best_rate = advantage * rows / (knee + rows)
    best = [0] * rows
    for width in range(2, min(max(offers), MAX_DRAFT) + 2):
        drafts = [min(o, width - 1) for o in offers]
        gain = sum(1 + expected_accepted(a, d) for a, d in zip(acceptance, drafts))
        rate = gain / (knee + rows * width)
        if rate > best_rate:
            best_rate, best = rate, drafts
    return best


class StepCost:
    """`plan`'s knee, refined from the steps the batch runs: a least-squares fit, weighted
    toward recent steps, of each step's time (from its start to the next step's) against
    the tokens it fed: t = fixed + per_token * N, knee = fixed / per_token. Plain steps are
    timed the same way, so their overlap of host and MLX work counts in their favour. Until
    the steps seen vary enough in N, the calibrated knee stands; the fit moves it at most
    COST_FIT_DOWN times lower or COST_FIT_UP times higher (timings on a shared machine are
    noisy, and an overstated knee makes speculation slower than plain decoding)."""

    def __init__(self, knee: float, learn: bool = True):
        self.prior = knee
        self.learn = learn
        self._sums = [0.0] * 5   # weight, n, t, n*n, n*t

    def observe(self, tokens: int, seconds: float) -> None:
        if not self.learn:
            return
        fixed, per_token = self._fit()
        if per_token is not None and seconds > 4 * (fixed + per_token * tokens):
            return   # something else held the thread (prefill, a pause): not a step's cost
        n, t = float(tokens), seconds
        self._sums = [COST_MEMORY * a + b for a, b in zip(self._sums, (1, n, t, n * n, n * t))]

    def _fit(self) -> tuple[float, float | None]:
        w, n, t, nn, nt = self._sums
        if w < COST_MIN_WEIGHT:
            return 0.0, None
        var = nn / w - (n / w) ** 2
        if var < 1.0:
            return 0.0, None
        per_token = (nt / w - n * t / w ** 2) / var
        return t / w - per_token * n / w, per_token

    @property
    def knee(self) -> float:
        fixed, per_token = self._fit()
        if per_token is None:
            return self.prior
        knee = fixed / per_token if per_token > 0 else MAX_KNEE
        return min(max(knee, self.prior / COST_FIT_DOWN), self.prior * COST_FIT_UP)


@attrs.define
class WidthGuard:
    """The guard's record of one batch width (a number of rows)."""

    on: bool = True
    plain: deque[float] = attrs.Factory(lambda: deque(maxlen=GUARD_PLAIN))   # step seconds
    tokens: int = 0         # the open window: tokens emitted by its runs,
    seconds: float = 0.0    # their time,
    steps: int = 0          # and their speculative steps
    losses: int = 0         # consecutive losing windows
    windows: int = 0        # windows judged
    ratio: float | None = None   # the last window's rate against plain decoding's
    probe_in: int = GUARD_PROBE_EVERY   # plain steps while off before the next probe
    probe_every: int = GUARD_PROBE_EVERY
    probing: bool = False

    @property
    def state(self) -> str:
        return "probing" if self.probing else "on" if self.on else "off"


class Guard:
    """Whether speculation pays at each batch width, measured, and judged on windows.

    A run of speculative steps is timed together with the plain step after it (mlx-lm's
    plain steps are pipelined: each starts the next forward pass before it waits for the
    current one, so the first speculative step also waits out the pass the plain step
    before it started, and the first plain step after the run returns at once; taken
    together they cost what they cost). Runs add up into a window of at least
    GUARD_WINDOW speculative steps, whose tokens per second is compared with the median of
    the last GUARD_PLAIN plain steps of the same width (rows; a batch that changed between
    two steps is not timed). A window below GUARD_LOSS of plain's rate is a loss, one at or
    above it resets the count; drafting stops at that width only after GUARD_LOSSES losing
    windows in a row. So a stream whose drafts are accepted keeps drafting, a noisy step or
    two cannot switch it off, and a batch where speculation loses stops after a few dozen
    steps. While off, a probe window every GUARD_PROBE_EVERY plain steps of that width
    (doubling while probes lose, up to GUARD_PROBE_MAX) measures again; a probe that does
    not lose turns drafting back on."""

    def __init__(self) -> None:
        self.widths: dict[int, WidthGuard] = {}
        self._run: tuple[int, float, int] | None = None   # tokens, seconds, steps so far

    def width(self, rows: int) -> WidthGuard:
        guard = self.widths.get(rows)
        if guard is None:
            guard = self.widths[rows] = WidthGuard()
        return guard

    def allows(self, rows: int) -> bool:
        """Whether a batch of `rows` rows may draft now."""
        guard = self.widths.get(rows)
        return guard is None or guard.on or guard.probing

    def step(self, speculative: bool, rows: int, emitted: int, seconds: float) -> None:
        """One timed step of a batch of `rows` rows that emitted `emitted` tokens. Consecutive
        steps have the same rows: a step after the batch changed is `untimed`."""
        if speculative:
            tokens, spent, steps = self._run or (0, 0.0, 0)
            self._run = (tokens + emitted, spent + seconds, steps + 1)
            return
        guard = self.width(rows)
        if self._run is not None:
            tokens, spent, steps = self._run
            self._run = None
            guard.tokens += tokens + emitted
            guard.seconds += spent + seconds
            guard.steps += steps
            if guard.steps >= GUARD_WINDOW:
                self._judge(rows, guard)
            return
        guard.plain.append(seconds)
        if not guard.on and not guard.probing:
            guard.probe_in -= 1
            if guard.probe_in <= 0:
                guard.probing = True

    def untimed(self) -> None:
        """A step that could not be timed (the batch changed, or prefill ran): a run in
        progress is not counted."""
        self._run = None

    def _judge(self, rows: int, guard: WidthGuard) -> None:
        tokens, seconds = guard.tokens, guard.seconds
        guard.tokens, guard.seconds, guard.steps = 0, 0.0, 0
        if len(guard.plain) < GUARD_PLAIN // 2 or seconds <= 0:
            return   # nothing to compare with yet
        plain = statistics.median(guard.plain)
        guard.ratio = (tokens / seconds) / (rows / plain) if plain > 0 else None
        guard.windows += 1
        lost = guard.ratio is not None and guard.ratio < GUARD_LOSS
        if guard.probing:
            guard.probing = False
            if lost:
                guard.probe_every = min(GUARD_PROBE_MAX, 2 * guard.probe_every)
                guard.probe_in = guard.probe_every
            else:
                guard.on, guard.losses, guard.probe_every = True, 0, GUARD_PROBE_EVERY
            return
        guard.losses = guard.losses + 1 if lost else 0
        if guard.losses >= GUARD_LOSSES:
            guard.on, guard.losses = False, 0
            guard.probe_in = guard.probe_every


def calibrate(model: Any, tokens: int = 32, repeats: int = 3) -> float:
    """The model's fixed cost of a forward pass in units of its cost per token (`plan`'s
    knee), from the fastest of a few passes over 1 and over `tokens` tokens."""
    passes = calibrating(model, tokens, repeats)
    while True:
        try:
            next(passes)
        except StopIteration as done:
            knee: float = done.value
            return knee


def calibrating(model: Any, tokens: int = 32, repeats: int = 3, stream: Any = None
                ) -> Generator[None, Any, float]:
    """`calibrate` in pieces: it yields after each forward pass (the engine host steps other
    models between them) and returns the knee. `stream`: where the passes run."""
    import time

    from mlx_lm.models.cache import make_prompt_cache

    times: dict[int, list[float]] = {1: [], tokens: []}
    for n in (1, tokens):
        for _ in range(repeats):
            cache = make_prompt_cache(model)
            start = time.perf_counter()
            with mx.stream(stream if stream is not None else mx.default_stream(
                    mx.default_device())):
                mx.eval(model(mx.zeros((1, n), dtype=mx.int32), cache=cache))
            times[n].append(time.perf_counter() - start)
            yield
    one, many = min(times[1]), min(times[tokens])
    per_token = max(many - one, 1e-9) / (tokens - 1)
    return min(max(one / per_token, 1.0), MAX_KNEE)


class Decider(Protocol):
    """Where a decode step's choice comes from on several ranks (lockstep.Lockstep)."""

    @property
    def leads(self) -> bool: ...

    def decide(self, drafts: list[list[int]] | None) -> list[list[int]] | None:
        """Rank 0: sends its choice (None: a plain step; else each row's draft) and returns
        it. The others: return rank 0's."""


def install(generator: Any, knee: float | None = None, learn: bool = True,
            decider: Decider | None = None, vocabulary: int | None = None) -> None:
    """Makes `generator` (an mlx-lm BatchGenerator with nothing running) decode
    speculatively; `knee` as `plan` takes it (default: `calibrate`d on its model), refined
    from the steps' timings unless `learn` is false. `decider`: under --distributed, where
    each step's choice is shared (rank 0) or taken from (the others). `vocabulary`: where a
    vision model's image rows' ids begin (model/vision.py); drafts stop before them."""
    assert len(generator._generation_batch) == 0, "install before inserting sequences"
    batch = SpeculativeBatch.empty(generator.model, generator.sampler)
    batch.decider = decider
    batch.vocabulary = vocabulary
    with mx.stream(generator.stream):
        batch.cost = StepCost(calibrate(generator.model) if knee is None else knee, learn)
    batch.prefill_counters = generator._counters
    generator._generation_batch = batch


class HoleyKVCache(BatchKVCache):  # type: ignore[misc]   # mlx-lm is untyped
    """A BatchKVCache whose rows may have holes: positions a speculative step wrote but the
    row did not keep (rejected draft tokens, padding). Attention skips them; the row's RoPE
    offset counts only what it kept. `kept` covers positions [0, its width); later positions
    (plain steps') are all kept."""

    kept: Any = None   # bool (rows, width) or None: no holes
    keys: Any          # BatchKVCache's own, set in its methods
    values: Any
    offset: Any
    left_padding: Any
    _idx: int

    @classmethod
    def adopt(cls, cache: Any) -> "HoleyKVCache":
        """`cache`, a BatchKVCache, as one of these (same object, no copy)."""
        if type(cache) is not cls:
            cache.__class__ = cls
            cache.kept = None
        return cast(HoleyKVCache, cache)

    def _kept_until(self, end: int) -> Any:
        kept = self.kept
        if kept.shape[1] < end:
            kept = mx.concatenate(
                [kept, mx.ones((kept.shape[0], end - kept.shape[1]), dtype=mx.bool_)], axis=1)
        return kept[:, :end]

    def make_mask(self, N: int, return_array: bool = False, **kwargs: Any) -> Any:
        mask = super().make_mask(N, return_array=return_array, **kwargs)
        if self.kept is None:
            return mask
        return mask & self._kept_until(self._idx + N)[:, None, None, :]

    def keep(self, width: int, kept: Any) -> None:
        """After a step wrote `width` positions: row i keeps the first kept[i] of them."""
        block = mx.arange(width)[None, :] < kept[:, None]
        start = self._idx - width
        before = (self._kept_until(start) if self.kept is not None
                  else mx.ones((block.shape[0], start), dtype=mx.bool_))
        self.kept = mx.concatenate([before, block], axis=1)
        self.offset = self.offset - (width - kept)

    def compact(self) -> None:
        """Moves every row's kept positions together, right-aligned: one gather."""
        if self.kept is None or self.keys is None:
            return
        kept = self._kept_until(self._idx)
        positions = mx.arange(self._idx)[None, :]
        valid = kept & (positions >= self.left_padding[:, None])
        counts = valid.sum(axis=1).astype(mx.int32)
        width = cast(int, counts.max().item())
        # Row i's kept positions in order, last: sort holes (keyed by position) before them
        # (keyed by position + the cache's length).
        order = mx.argsort(mx.where(valid, positions + self._idx, positions), axis=1)
        index = order[:, self._idx - width:][:, None, :, None]
        self.keys = mx.take_along_axis(self.keys[..., :self._idx, :], index, axis=2)
        self.values = mx.take_along_axis(self.values[..., :self._idx, :], index, axis=2)
        self.left_padding = width - counts
        self._idx = width
        self.kept = None

    def extract(self, idx: int) -> Any:
        if self.kept is None:
            return super().extract(idx)
        padding = cast(int, self.left_padding[idx].item())
        row = cast(list[bool], self._kept_until(self._idx)[idx].tolist())
        positions = mx.array([p for p in range(padding, self._idx) if row[p]])
        cache = KVCache()
        cache.keys = mx.contiguous(self.keys[idx:idx + 1, :, positions])
        cache.values = mx.contiguous(self.values[idx:idx + 1, :, positions])
        cache.offset = cache.keys.shape[2]
        return cache

    def filter(self, batch_indices: Any) -> None:
        before = self._idx
        super().filter(batch_indices)
        if self.kept is not None:
            self.kept = self._kept_until(before)[mx.array(batch_indices)][:, before - self._idx:]

    def extend(self, other: Any) -> None:
        """Appends `other`'s rows (mlx-lm right-aligns both sides' positions)."""
        sides = [(self.kept, self._idx, len(self.offset)),
                 (getattr(other, "kept", None), other._idx, len(other.offset))]
        super().extend(other)
        if all(kept is None for kept, _, _ in sides):
            return
        blocks = []
        for kept, idx, rows in sides:
            block = mx.ones((rows, self._idx), dtype=mx.bool_)
            if kept is not None:
                covered = min(kept.shape[1], idx)
                shift = self._idx - idx
                block[:, shift:shift + covered] = kept[:, :covered]
            blocks.append(block)
        self.kept = mx.concatenate(blocks, axis=0)


@dataclasses.dataclass
class DraftResponse(GenerationBatch.Response):  # type: ignore[misc]   # mlx-lm is untyped
    """mlx-lm's per-token response, and whether the token was an accepted draft token."""

    drafted: bool = False


class SpeculativeBatch(GenerationBatch):  # type: ignore[misc]   # mlx-lm is untyped
    """mlx-lm's decode batch with prompt-lookup drafts verified in one pass per step."""

    cost = StepCost(32.0)   # set by `install`
    Response = DraftResponse
    prefill_counters: Any = None   # the generator's: prefill between two steps spoils a timing
    decider: Decider | None = None   # --distributed: the ranks' one choice per step
    vocabulary: int | None = None    # ids at or past it are never drafted (image rows)
    _next_tokens: Any   # GenerationBatch's own, set in its methods
    _next_logprobs: list[Any]
    _current_tokens: Any

    def __init__(self, *args: Any, **kwargs: Any):
        self._rows: dict[int, _Row] = {}   # by generator uid
        # The last step's start, tokens fed, uids, prefilled tokens then, tokens emitted and
        # whether it was speculative.
        self._timing: tuple[float, int, list[int], int, int, bool] | None = None
        self.guard = Guard()
        self._holes: list[int] = []   # per row: positions of its cache it did not keep
        self._plain_run = 0   # plain steps since the last speculative one
        self._skip = 0        # plain steps left before drafts are looked for again
        self._next_skip = 1
        # Steps by kind, draft tokens verified and accepted, tokens emitted (`statistics`).
        self.counts = dict.fromkeys(("plain", "speculative", "compact", "drafted", "accepted",
                                     "sequence_steps", "tokens", "speculative_tokens"), 0)
        super().__init__(*args, **kwargs)

    def extend(self, batch: Any) -> None:
        super().extend(batch)
        self._holes += [0] * (len(self.uids) - len(self._holes))

    def statistics(self) -> SpeculationStatistics:
        c = self.counts
        return SpeculationStatistics(
            plain_steps=c["plain"], speculative_steps=c["speculative"],
            sequence_steps=c["sequence_steps"], tokens=c["tokens"],
            speculative_tokens=c["speculative_tokens"], drafted=c["drafted"],
            accepted=c["accepted"], compactions=c["compact"],
            guard=tuple(GuardStatistics(width, g.state, g.windows, g.losses, g.ratio)
                        for width, g in sorted(self.guard.widths.items())))

    def filter(self, keep: list[int]) -> None:
        super().filter(keep)
        self._holes = [self._holes[i] for i in keep]
        alive = set(self.uids)
        for uid in [u for u in self._rows if u not in alive]:
            del self._rows[uid]

    def next(self) -> list[Any]:
        self._time_step()
        if not self.uids:
            return []
        if self.decider is not None and not self.decider.leads:
            return self._follow(self.decider.decide(None))
        chosen = self._choose()
        if self.decider is not None:
            self.decider.decide(None if chosen is None else chosen[2])
        if chosen is None:
            return self._plain_next()
        return self._verify(*chosen)

    def _choose(self) -> tuple[list[_Row], list[int], list[list[int]]] | None:
        """This step's rows, their unfed tokens and drafts; None for a plain step."""
        if self._skip:
            self._skip -= 1
            return None
        if not self._speculates():
            return None   # rotating or quantized caches: never
        if not self.guard.allows(len(self.uids)):
            return None   # drafting does not pay at this width, measured
        rows = self._rows_in_order()
        if not self._may_draft(rows):
            self._skip, self._next_skip = self._next_skip, min(MAX_SKIP, 2 * self._next_skip)
            return None
        return self._drafts(rows)

    def _follow(self, drafts: list[list[int]] | None) -> list[Any]:
        """Another rank's step: rank 0's choice, on this rank's rows."""
        if drafts is None:
            return self._plain_next()
        rows = self._rows_in_order()
        xs = cast(list[int], self._next_tokens.tolist())
        for row, x in zip(rows, xs):
            row.index.tokens.append(x)   # x is emitted by this step
        return self._verify(rows, xs, drafts)

    def _plain_next(self) -> list[Any]:
        rows = len(self.uids)
        self._count(False, rows, rows)
        self._plain_run += 1
        self._fed(rows, rows, False)
        return list(super().next())

    def _count(self, speculative: bool, rows: int, emitted: int) -> None:
        c = self.counts
        c["speculative" if speculative else "plain"] += 1
        c["sequence_steps"] += rows
        c["tokens"] += emitted
        if speculative:
            c["speculative_tokens"] += emitted

    def _time_step(self) -> None:
        """Gives the previous step's time to the cost fit, unless the batch changed or
        prefill ran in between."""
        import time

        now = time.perf_counter()
        prefilled = self.prefill_counters.prompt_tokens if self.prefill_counters else 0
        if self._timing is not None:
            start, fed, uids, before, emitted, speculative = self._timing
            if fed and uids == self.uids and prefilled == before:
                self.cost.observe(fed, now - start)
                self.guard.step(speculative, len(uids), emitted, now - start)
            else:
                self.guard.untimed()
        self._timing = (now, 0, list(self.uids), prefilled, 0, False)

    def _fed(self, tokens: int, emitted: int, speculative: bool) -> None:
        if self._timing is not None:
            start, _, uids, prefilled, _, _ = self._timing
            self._timing = (start, tokens, uids, prefilled, emitted, speculative)

    # -- state ---------------------------------------------------------------------------

    def _rows_in_order(self) -> list[_Row]:
        rows = []
        for i, uid in enumerate(self.uids):
            row = self._rows.get(uid)
            if row is None:
                row = self._rows[uid] = _Row(NgramIndex(self.tokens[i], self.vocabulary))
            row.index.catch_up(self.tokens[i])
            if row.paused:
                row.paused -= 1
            rows.append(row)
        return rows

    def _speculates(self) -> bool:
        """Whether this batch's caches can have holes (plain BatchKVCache in every layer)."""
        return all(type(c) is BatchKVCache or type(c) is HoleyKVCache
                   for c in self.prompt_cache)

    def _drafting(self, i: int, row: _Row) -> bool:
        return not row.paused and not (self.logits_processors and self.logits_processors[i])

    def _budget(self, i: int, row: _Row) -> int:
        """The longest draft row i may have now."""
        left: int = self.max_tokens[i] - self._num_tokens[i]
        return min(row.draft_len, left - 1)

    def _may_draft(self, rows: list[_Row]) -> bool:
        """Whether drafting looks worth a step, judged before the rows' sampled-but-unfed
        tokens are known (waiting for them would stall mlx-lm's pipelined step): each row's
        lookup, one token longer, has its first token stand in for that token."""
        offers = [max(0, len(row.index.propose(self._budget(i, row) + 1)) - 1)
                  if self._drafting(i, row) else 0 for i, row in enumerate(rows)]
        return any(offers) and (self._exploring() or any(
            plan(offers, [r.acceptance for r in rows], self.cost.knee, PLAIN_ADVANTAGE)))

    def _exploring(self) -> bool:
        return self._plain_run >= EXPLORE_EVERY

    # -- the speculative step ------------------------------------------------------------

    def _drafts(self, rows: list[_Row]) -> tuple[list[_Row], list[int], list[list[int]]] | None:
        xs = cast(list[int], self._next_tokens.tolist())
        offered: list[list[int]] = []
        for i, (row, x) in enumerate(zip(rows, xs)):
            row.index.tokens.append(x)   # x is emitted by this step
            offered.append(row.index.propose(self._budget(i, row))
                           if self._drafting(i, row) else [])
        lengths = plan([len(o) for o in offered], [r.acceptance for r in rows], self.cost.knee,
                       PLAIN_ADVANTAGE)
        if not any(lengths) and self._exploring():
            lengths = [min(len(o), 1) for o in offered]
        if not any(lengths):
            return None   # x is known now, but the step is the same
        return rows, xs, [o[:n] for o, n in zip(offered, lengths)]

    def _verify(self, rows: list[_Row], xs: list[int], drafts: list[list[int]]) -> list[Any]:
        """One forward pass over every row's unfed token x and draft; emits x and the
        accepted draft tokens, samples the next x."""
        self._plain_run = 0
        self._next_skip = 1
        caches = [HoleyKVCache.adopt(c) for c in self.prompt_cache]
        width = 1 + max(len(d) for d in drafts)
        inputs = mx.array([[x] + d + [0] * (width - 1 - len(d)) for x, d in zip(xs, drafts)])
        logits = self.model(inputs, cache=caches)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        # Each row's distributions at its positions to sample: after x, after each draft token.
        at = [self._processed(i, logits[i, :1], xs[i])
              if self.logits_processors and self.logits_processors[i]
              else logprobs[i, :1 + len(d)]
              for i, d in enumerate(drafts)]
        sampled = self._sample(at, drafts)
        accepted = []
        for row, d, s in zip(rows, drafts, sampled):
            n = 0
            while n < len(d) and s[n] == d[n]:
                n += 1
            accepted.append(n)
            if d:
                row.adapt(len(d), n)
                self.counts["drafted"] += len(d)
        # Every layer's cache has the same rows and positions: one mask of kept positions
        # (and one offset) serves them all, and the holes are counted here, on the host,
        # so deciding on compaction never waits for MLX.
        first = caches[0]
        first.keep(width, mx.array([1 + n for n in accepted]))
        for c in caches[1:]:
            c.kept, c.offset = first.kept, first.offset
        self._holes = [h + width - 1 - n for h, n in zip(self._holes, accepted)]

        responses: list[Any] = []
        keep: list[int] = []
        for i, (x, d, s, n) in enumerate(zip(xs, drafts, sampled, accepted)):
            emit = [x] + d[:n]
            emit_logprobs = [self._next_logprobs[i]] + [at[i][j] for j in range(n)]
            finish = None
            for j, (token, lp) in enumerate(zip(emit, emit_logprobs)):
                self._num_tokens[i] += 1
                if self._num_tokens[i] >= self.max_tokens[i]:
                    finish = "length"
                if self._matchers[i].advance(token):
                    finish = "stop"
                cache = all_tokens = None
                if finish is not None:
                    cache = self._extract(i, len(emit) - j - 1)
                    all_tokens = self.tokens[i] + emit[:j + 1]
                responses.append(self.Response(self.uids[i], token, lp, finish, cache,
                                               all_tokens, drafted=j > 0))
                if finish is not None:
                    break
            if finish is None:
                keep.append(i)
                self.tokens[i].extend(emit)
        # Counted as emitted: a row that finished inside its accepted run emits less of it.
        self.counts["accepted"] += sum(r.drafted for r in responses)
        self._count(True, len(drafts), len(responses))
        self._fed(width * len(drafts), len(responses), True)
        self._next_tokens = mx.array([s[n] for s, n in zip(sampled, accepted)])
        self._next_logprobs = [a[n] for a, n in zip(at, accepted)]
        self._current_tokens = None
        if len(keep) < len(self.uids):
            self.filter(keep)   # with no rows kept, this empties the batch
        self._maybe_compact()
        return responses

    def _maybe_compact(self) -> None:
        caches = self.prompt_cache
        if not caches or type(caches[0]) is not HoleyKVCache or caches[0].kept is None:
            return
        holes = sum(self._holes)
        if holes >= max(COMPACT_MIN, COMPACT_SHARE * caches[0]._idx * len(self.uids)):
            self.counts["compact"] += 1
            for c in caches:
                c.compact()
            self._holes = [0] * len(self.uids)

    def _processed(self, i: int, logits: Any, x: int) -> Any:
        """Row i's logits after its processors (which never draft: one position)."""
        context = self._token_context[i].update_and_fetch(mx.array([x]))
        for processor in self.logits_processors[i]:
            logits = processor(context, logits)
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    def _sample(self, at: list[Any], drafts: list[list[int]]) -> list[list[int]]:
        """Each row's sampled tokens at its positions, as its sampler would draw them."""
        samplers = [s if s is not None else self.fallback_sampler
                    for s in (self.samplers or [None] * len(at))]
        out: list[list[int]] = [[] for _ in at]
        by_sampler: dict[int, list[int]] = {}
        for i, s in enumerate(samplers):
            if s in _sequential:
                out[i] = self._sample_sequentially(s, at[i], drafts[i])
            else:
                by_sampler.setdefault(id(s), []).append(i)
        for group in by_sampler.values():
            sampler = samplers[group[0]]
            stacked = mx.concatenate([at[i] for i in group]) if len(group) > 1 else at[group[0]]
            if sampler is greedy_sampler:
                tokens = mx.argmax(stacked, axis=-1)
            else:
                tokens = sampler(stacked)
            flat = cast(list[int], tokens.tolist())
            start = 0
            for i in group:
                out[i] = flat[start:start + at[i].shape[0]]
                start += at[i].shape[0]
        return out

    @staticmethod
    def _sample_sequentially(sampler: Callable[[Any], Any], at: Any,
                             draft: list[int]) -> list[int]:
        """Samples position by position until one differs from the draft."""
        out: list[int] = []
        for j in range(at.shape[0]):
            out.append(int(sampler(at[j:j + 1]).item()))
            if j >= len(draft) or out[-1] != draft[j]:
                break
        return out

    def _extract(self, i: int, unkept: int) -> list[Any]:
        """Row i's KV cache without the last `unkept` tokens of this step."""
        cache: list[Any] = self.extract_cache(i)
        for c in cache:
            c.trim(unkept)
        return cache
