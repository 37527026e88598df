"""Prompt-lookup speculative decoding inside mlx-lm's batched generation (issue 16).

No draft model: a sequence's draft is what followed the most recent earlier occurrence of its
last few tokens in its own prompt and output (an edit, a quote, code being rewritten repeat
long runs of the prompt). One forward pass per step verifies every row's draft at once.

It lives in `SpeculativeBatch`, a `GenerationBatch` (mlx-lm's decode-phase batch) that
`install` puts into a `BatchGenerator`: the generator still prefills, joins and removes
sequences; only its decode step changes. A step with no draft anywhere is mlx-lm's own
pipelined single-token step, so speculation costs nothing where there is nothing to copy.

**Row state.** mlx-lm keeps per row the tokens in the KV cache (`tokens[i]`) and one sampled
token `x` not yet fed (`_next_tokens[i]`, emitted by the step that feeds it). A speculative
step adds `forced[i]`: tokens already emitted whose KV was computed but trimmed (below).
A row's input is `forced + [x] + draft`, right-padded to the batch's longest row, L.

**Lockstep cache.** mlx-lm's `BatchKVCache` has one write position for the whole batch, so
after the forward pass every layer cache is trimmed by the same amount, back to `m`: the
fewest valid new positions over the rows (a row's valid positions are its forced tokens, x
and its accepted draft tokens). Each row's valid tokens beyond `m` become its `forced` for the
next step, fed again (and recomputed exactly: the same tokens at the same positions). A row's
input is capped at MAX_DRAFT + 1 tokens, so rows never drift further apart than that. When no
row has a draft but some have forced tokens, a "settle" step feeds them right-padded and lets
the cache roll each row into place (mlx-lm's `prepare`/`finalize`, as prefill does): one
whole-cache copy, only when speculation pauses, after which plain steps resume.

**Exactness.** Each verified position is sampled with the row's own sampler from the same
(processed) distribution plain decoding would use there, and a draft token is accepted iff it
equals that sample; the first mismatch's sample is the correction, a fully accepted draft's
next sample the bonus. With a point-mass draft this is speculative sampling's rule exactly:
token d is accepted with probability p(d); on rejection the sample is distributed as p with d
removed and renormalised. Greedy decoding is the argmax, so the output is identical to plain
decoding's; a seeded sampler is called once per emitted token in order, as plain decoding
calls it, so a seed gives the same tokens with or without speculation.

Rows with logits processors (grammars, repetition penalties) never draft. Only batches whose
layer caches are all `BatchKVCache`, or `BatchRotatingKVCache` that has room left before it
rotates, speculate.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

import attrs
import mlx.core as mx
from mlx_lm.generate import GenerationBatch, greedy_sampler
from mlx_lm.models.cache import BatchKVCache, BatchRotatingKVCache

NGRAM_SIZES = (3, 2)      # the suffix lengths looked up, longest first
MAX_DRAFT = 8             # draft tokens per row and step; also the most rows drift apart
FIRST_DRAFT = 4           # a row's draft length until its acceptance adapts it
MISSES_BEFORE_PAUSE = 2   # drafts in a row with nothing accepted before drafting pauses
FIRST_PAUSE = 4           # steps; doubles on each pause with no acceptance between
MAX_PAUSE = 64

# Samplers that keep per-sequence random state (a seeded request's key): called one position
# at a time, once per emitted token, exactly as plain decoding calls them.
_sequential: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


def one_token_per_call(sampler: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Marks `sampler` as stateful: speculation calls it once per position, in order."""
    _sequential.add(sampler)
    return sampler


class NgramIndex:
    """A sequence's tokens and, for each n in NGRAM_SIZES, where each n-gram last ended."""

    def __init__(self, tokens: Sequence[int]):
        self.tokens: list[int] = list(tokens)
        self._last_end: dict[tuple[int, ...], int] = {}
        self._indexed = 0   # n-grams ending at or before this position are in _last_end

    def catch_up(self, in_cache: list[int], forced: list[int]) -> None:
        """Appends what of `in_cache + forced` (append-only) it does not hold yet."""
        have = len(self.tokens)
        if have < len(in_cache):
            self.tokens += in_cache[have:]
            self.tokens += forced
        else:
            self.tokens += forced[have - len(in_cache):]

    def propose(self, k: int) -> list[int]:
        """Up to `k` tokens that followed the latest earlier occurrence of the suffix."""
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
                    return tokens[start:start + k]
        return []


@attrs.define
class _Row:
    """Speculation's record of one sequence of the batch."""

    index: NgramIndex
    forced: list[int] = attrs.field(factory=list)   # emitted, KV trimmed: fed again
    draft_len: int = FIRST_DRAFT
    misses: int = 0      # consecutive drafts with nothing accepted
    paused: int = 0      # steps left without drafting
    pause: int = FIRST_PAUSE

    def adapt(self, drafted: int, accepted: int) -> None:
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


def install(generator: Any) -> None:
    """Makes `generator` (an mlx-lm BatchGenerator with nothing running) decode
    speculatively."""
    assert len(generator._generation_batch) == 0, "install before inserting sequences"
    generator._generation_batch = SpeculativeBatch.empty(generator.model, generator.sampler)


class SpeculativeBatch(GenerationBatch):  # type: ignore[misc]   # mlx-lm is untyped
    """mlx-lm's decode batch with prompt-lookup drafts verified in one pass per step."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._rows: dict[int, _Row] = {}   # by generator uid
        super().__init__(*args, **kwargs)

    def filter(self, keep: list[int]) -> None:
        super().filter(keep)
        alive = set(self.uids)
        for uid in [u for u in self._rows if u not in alive]:
            del self._rows[uid]

    def next(self) -> list[Any]:
        if not self.uids:
            return []
        rows = self._rows_in_order()
        if not any(r.forced for r in rows) and not self._may_draft(rows):
            return list(super().next())
        return self._speculative_next(rows)

    # -- state ---------------------------------------------------------------------------

    def _rows_in_order(self) -> list[_Row]:
        rows = []
        for i, uid in enumerate(self.uids):
            row = self._rows.get(uid)
            if row is None:
                row = self._rows[uid] = _Row(NgramIndex(self.tokens[i]))
            row.index.catch_up(self.tokens[i], row.forced)
            if row.paused:
                row.paused -= 1
            rows.append(row)
        return rows

    def _drafting(self, i: int, row: _Row) -> bool:
        return not row.paused and not (self.logits_processors and self.logits_processors[i])

    def _may_draft(self, rows: list[_Row]) -> bool:
        """Whether a row has a candidate draft, judged before its sampled-but-unfed token is
        known (waiting for it would stall mlx-lm's pipelined step): the lookup's first token
        stands in for it."""
        if not self._cache_has_room(MAX_DRAFT + 1):
            return False
        return any(self._drafting(i, row) and len(row.index.propose(row.draft_len + 1)) > 1
                   for i, row in enumerate(rows))

    def _cache_has_room(self, length: int) -> bool:
        """Whether every layer cache can take `length` more positions and be trimmed back
        (with room for a settle step after them)."""
        for c in self.prompt_cache:
            if type(c) is BatchKVCache:
                continue
            if type(c) is BatchRotatingKVCache and not c.rotated and (
                    c._offset + length + MAX_DRAFT + 1 < c.max_size):
                continue
            return False
        return True

    # -- the speculative step ------------------------------------------------------------

    def _speculative_next(self, rows: list[_Row]) -> list[Any]:
        xs: list[int] = self._next_tokens.tolist()
        pending = [row.forced + [x] for row, x in zip(rows, xs)]
        drafts: list[list[int]] = []
        room = self._cache_has_room(MAX_DRAFT + 1)
        for i, (row, x) in enumerate(zip(rows, xs)):
            row.index.tokens.append(x)   # x is emitted by this step
            budget = min(row.draft_len, MAX_DRAFT + 1 - len(pending[i]),
                         self.max_tokens[i] - self._num_tokens[i] - 1)
            drafts.append(row.index.propose(budget) if room and self._drafting(i, row) else [])
        if not any(drafts):
            if not any(row.forced for row in rows):
                return list(super().next())   # x is known now, but the step is the same
            return self._verify(rows, pending, drafts, settle=True)
        return self._verify(rows, pending, drafts, settle=False)

    def _verify(self, rows: list[_Row], pending: list[list[int]], drafts: list[list[int]],
                settle: bool) -> list[Any]:
        """One forward pass over every row's pending tokens and draft; emits each row's
        pending x and accepted draft tokens, samples its next x."""
        lengths = [len(p) + len(d) for p, d in zip(pending, drafts)]
        width = max(lengths)
        inputs = mx.array([p + d + [0] * (width - n)
                           for p, d, n in zip(pending, drafts, lengths)])
        if settle:
            for c in self.prompt_cache:
                c.prepare(lengths=lengths, right_padding=[width - n for n in lengths])
        logits = self.model(inputs, cache=self.prompt_cache)
        if settle:
            for c in self.prompt_cache:
                c.finalize()
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        # Each row's distributions at its positions to sample: the one after x, then after
        # each draft token.
        at = [self._processed(i, logits[i, len(p) - 1:len(p)], p[-1])
              if self.logits_processors and self.logits_processors[i]
              else logprobs[i, len(p) - 1:len(p) + len(d)]
              for i, (p, d) in enumerate(zip(pending, drafts))]
        sampled = self._sample(at, drafts)

        responses: list[Any] = []
        keep: list[int] = []
        valid: list[int] = []       # per kept row: its tokens whose KV is right
        next_x: list[int] = []      # per row: its next sampled token, not yet fed
        next_logprobs: list[Any] = []
        for i, (row, p, d, s) in enumerate(zip(rows, pending, drafts, sampled)):
            accepted = 0
            while accepted < len(d) and s[accepted] == d[accepted]:
                accepted += 1
            if d:
                row.adapt(len(d), accepted)
            fed = p + d[:accepted]                     # all emitted, all with valid KV
            emit = fed[len(row.forced):]
            emit_logprobs = [self._next_logprobs[i]] + [at[i][j] for j in range(accepted)]
            finish = None
            for n, (token, lp) in enumerate(zip(emit, emit_logprobs)):
                self._num_tokens[i] += 1
                if self._num_tokens[i] >= self.max_tokens[i]:
                    finish = "length"
                if self._matchers[i].advance(token):
                    finish = "stop"
                cache = all_tokens = None
                if finish is not None:
                    in_kv = len(row.forced) + n + 1
                    cache = self._extract(i, lengths[i] if settle else width, in_kv)
                    all_tokens = self.tokens[i] + fed[:in_kv]
                responses.append(self.Response(self.uids[i], token, lp, finish, cache,
                                               all_tokens))
                if finish is not None:
                    break
            next_x.append(s[accepted])   # (a finished row's is dropped by filter below)
            next_logprobs.append(at[i][accepted])
            if finish is None:
                keep.append(i)
                valid.append(len(fed))
            row.forced = fed   # trimmed to what stays out of the cache below

        if keep:
            kept = min(valid)
            if settle:
                kept = width   # finalize rolled every row's padding to its left
            else:
                for c in self.prompt_cache:
                    c.trim(width - kept)
            for i in keep:
                fed = rows[i].forced
                in_cache = len(fed) if settle else kept
                self.tokens[i].extend(fed[:in_cache])
                rows[i].forced = fed[in_cache:]
            self._next_tokens = mx.array(next_x)
            self._next_logprobs = next_logprobs
            self._current_tokens = None
        if len(keep) < len(self.uids):
            self.filter(keep)   # with no rows kept, this empties the batch
        return responses

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
            flat: list[int] = tokens.tolist()
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

    def _extract(self, i: int, written: int, in_kv: int) -> list[Any]:
        """Row i's KV cache, where this step wrote `written` positions, cut to its cached
        tokens and the first `in_kv` of this step's."""
        cache = self.extract_cache(i)
        for c in cache:
            c.trim(written - in_kv)
        return cache
