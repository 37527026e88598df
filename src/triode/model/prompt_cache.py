"""The engine's prompt cache: KV caches of earlier sequences, keyed by their tokens, for
prompts that start the same way (a conversation's next turn, a shared system prompt). The
engine thread's alone (docs/architecture.md, "Prompt cache").

Attention caches can be trimmed back to any earlier token, so one entry per finished
sequence serves every prompt that shares any prefix with it. A model with recurrent layers
(gated delta-net, Mamba: mlx-lm's `ArraysCache` beside its `KVCache`s) holds state that
cannot be rewound, and a sliding-window layer's `RotatingKVCache` cannot once it has wrapped
around: such an entry serves only prompts that extend it whole. For those models
(`needs_snapshots`) the engine also keeps a snapshot where the next turn of a conversation
will branch off: the end of the prompt's last message, before the generation prompt
(`snapshot_point`), since the next turn's template renders this turn's answer after it, and
not always as it was generated (a template that drops earlier turns' reasoning, or opens
`<think>` in its generation prompt).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterator, Sequence

import attrs

# The prompt cache's namespace for requests without a `prompt_cache_key` (one model per
# engine: every entry is this model's); a request's key names a namespace of its own.
PROMPT_CACHE_KEY = "model"
PROMPT_CACHE_MAX_ENTRIES = 64     # distinct cached sequences (prefixes of a kept one are dropped)
# Untrimmable entries that are prefixes of a newly kept one and survive it: the longest two.
# In a conversation those are the current turn's prompt snapshot and the entry its prompt was
# served from, which still serve a retried or edited last turn; older turns' are dropped.
KEPT_PREFIXES = 2

PROBE = "PROMPT-CACHE-PROBE"

# Told of each entry the LRU evicts: (namespace, tokens, its KV cache).
OnEvict = Callable[[str, list[int], Any], None]


@attrs.frozen
class CacheFigures:
    """What the engine reports of its prompt cache with each step."""

    entries: int
    nbytes: int
    disk: Any = None   # disk_cache.DiskFigures, with --prompt-cache-dir


class PromptCache:
    """mlx-lm's LRUPromptCache does the matching (the longest cached prefix, or a longer entry
    trimmed back to the common prefix) and the LRU eviction under `max_bytes`; this adds what
    an insert needs (at least one prompt token always goes through the model, since the first
    output token is sampled from its logits) and the untrimmable entries' bookkeeping."""

    def __init__(self, max_bytes: int, on_evict: OnEvict | None = None, *,
                 max_tokens: int | None = None):
        """`max_tokens`: the budget counted in tokens instead of `max_bytes` (the ranks of a
        sharded model hold different bytes per token, and must keep and evict alike)."""
        from mlx_lm.models.cache import LRUPromptCache

        self._max_tokens = max_tokens
        self._lru = LRUPromptCache(max_size=PROMPT_CACHE_MAX_ENTRIES,
                                   max_bytes=max_bytes if max_tokens is None else 1 << 62)
        self._evicted: list[tuple[str, list[int], Any]] = []
        self._on_evict = on_evict
        if on_evict is not None:
            self._lru._lru = _recording_order()(self._lru._trie, self._evicted)

    def fetch(self, prompt: list[int], namespace: str = PROMPT_CACHE_KEY
              ) -> tuple[Any, list[int]]:
        """(a KV cache covering a prefix of `prompt` or None, the tokens still to prefill)."""
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        kv, rest = self._lru.fetch_nearest_cache(namespace, prompt)
        if kv is not None and not rest:  # all of it cached: feed the last token again
            if can_trim_prompt_cache(kv):
                trim_prompt_cache(kv, 1)
                return kv, prompt[-1:]
            # Recurrent state cannot give the last token back: the longest entry short of it.
            kv, rest = self._lru.fetch_nearest_cache(namespace, prompt[:-1])
            rest = rest + prompt[-1:]
        return kv, rest

    def keep(self, tokens: list[int], kv: Any, namespace: str = PROMPT_CACHE_KEY) -> None:
        import mlx.core as mx
        from mlx_lm.models.cache import can_trim_prompt_cache

        if sum(c.nbytes for c in kv) > self._lru.max_bytes or (
                self._max_tokens is not None and len(tokens) > self._max_tokens):
            return  # never fits: inserted, it would first evict every other entry
        # A cache taken out of a batch is a lazy copy of the whole batch's buffers:
        # evaluated now, it holds its own few KB per token instead of pinning those buffers.
        mx.eval([c.state for c in kv])
        tokens = list(tokens)
        if not can_trim_prompt_cache(kv):   # (a trimmable one replaces its prefixes itself)
            for length in self._prefixes(tokens, namespace)[:-KEPT_PREFIXES]:
                self._drop(tokens[:length], namespace)
        self._lru.insert_cache(namespace, tokens, kv)
        if self._max_tokens is not None:
            self._evict_tokens(self._max_tokens)
        if self._on_evict is not None:
            evicted, self._evicted[:] = list(self._evicted), []
            for entry in evicted:
                self._on_evict(*entry)

    def entries(self) -> Iterator[tuple[str, list[int], Any]]:
        """Every entry (namespace, tokens, KV cache), least recently kept first."""
        order = self._lru._lru
        for namespace, tokens in [k for kind in reversed(order._ordering)
                                  for k in order._lrus[kind]]:
            yield namespace, list(tokens), self._lru._trie.get(namespace, tokens).prompt_cache

    def _prefixes(self, tokens: list[int], namespace: str) -> list[int]:
        """The lengths of the entries that are strict prefixes of `tokens`, shortest first."""
        node = self._lru._trie._trie.get(namespace)   # mlx-lm's PromptTrie: nested dicts
        lengths = []
        for i, token in enumerate(tokens):
            if node is None:
                break
            if i and "__value__" in node:
                lengths.append(i)
            node = node.get(token)
        return lengths

    def _evict_tokens(self, budget: int) -> None:
        """Least recently kept entries out until the entries hold at most `budget` tokens."""
        held = sum(len(tokens) for _, tokens, _ in self.entries())
        while held > budget and len(self._lru):
            namespace, tokens = self._lru._lru.pop()  # type: ignore[no-untyped-call]
            held -= len(tokens)
            self._forget(namespace, list(tokens))

    def _drop(self, tokens: list[int], namespace: str) -> None:
        """Removes one entry, as LRUPromptCache's own eviction does (it has no public call)."""
        self._lru._lru.remove(namespace, tokens)
        self._forget(namespace, tokens)

    def _forget(self, namespace: str, tokens: list[int]) -> None:
        """Removes an entry from the trie and the byte counts (its LRU place is gone)."""
        lru = self._lru
        entry = lru._trie.pop(namespace, tokens)
        lru._n_bytes -= entry.nbytes
        lru._n_bytes_by_type[entry.cache_type] -= entry.nbytes

    @property
    def nbytes(self) -> int:
        return int(self._lru.nbytes)

    def __len__(self) -> int:
        return len(self._lru)


@functools.cache
def _recording_order() -> Any:
    """mlx-lm's LRU order, which also notes each entry it gives up for eviction (the LRU
    evicts inside `insert_cache`, by popping this order and then the trie)."""
    from mlx_lm.models.cache import LRUPromptCache

    class RecordingOrder(LRUPromptCache.CacheOrder):
        def __init__(self, trie: Any, evicted: list[tuple[str, list[int], Any]]):
            super().__init__()
            self._trie = trie
            self._evicted = evicted

        def pop(self) -> Any:
            namespace, tokens = super().pop()  # type: ignore[no-untyped-call]
            self._evicted.append((namespace, list(tokens),
                                  self._trie.get(namespace, tokens).prompt_cache))
            return namespace, tokens

    return RecordingOrder


def needs_snapshots(caches: Sequence[Any]) -> bool:
    """Whether a new sequence's caches (one per layer) have a layer that cannot be trimmed
    back to an earlier token, now (recurrent state) or once it fills (a sliding window)."""
    from mlx_lm.models.cache import CacheList, RotatingKVCache

    def layers(c: Any) -> list[Any]:
        return [x for inner in c.caches for x in layers(inner)] if isinstance(c, CacheList) \
            else [c]

    return any(isinstance(c, RotatingKVCache) or not c.is_trimmable()
               for cache in caches for c in layers(cache))


def turn_close(tokenizer: Any) -> tuple[int, ...]:
    """The tokens the chat template ends a message with (`<|im_end|>\\n`, `<|eot_id|>`,
    `<end_of_turn>\\n`, `<|end|>`), from a one-message probe; () when the template cannot
    tell (no template, one that refuses the probe, or nothing after the message)."""
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": PROBE}],
                                             add_generation_prompt=False, tokenize=False)
    except Exception:   # any template error: no boundary known, nothing breaks
        return ()
    if not isinstance(text, str) or text.count(PROBE) != 1:
        return ()
    close = text.split(PROBE)[1]
    return tuple(tokenizer.encode(close, add_special_tokens=False)) if close else ()


def snapshot_point(prompt: Sequence[int], reused: int, close: Sequence[int]) -> int | None:
    """Where to snapshot an untrimmable cache while `prompt` is prefilled from position
    `reused` on: just after the last message's closing tokens `close` (the next turn renders
    the same history up to there, whatever it makes of this turn's answer), else (no such
    close past `reused`) before the prompt's last token; None when that is not past `reused`.
    """
    close = tuple(close)
    n = len(close)
    if n:
        last = close[-1]
        for end in range(len(prompt) - 1, max(n, reused + 1) - 1, -1):
            if prompt[end - 1] == last and tuple(prompt[end - n:end]) == close:
                return end
    point = len(prompt) - 1
    return point if point > reused else None
