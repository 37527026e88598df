"""The parts of --distributed that need no second process: the step record's trip, the
divergence check, the sharding refusals, and the prompt cache counted in tokens (whose
keeping and evicting every rank must do alike)."""

from __future__ import annotations

import pickle

import pytest

from triode.errors import SettingsError
from triode.model import lockstep
from triode.model.constraints import Grammar
from triode.model.engine import Insert, Remove
from triode.model.request import GenerationRequest, Sampling


GRAMMAR = Grammar('start: "<tool_call>" /[a-z]+/', (("TC", "<tool_call>"),))


class Channel(lockstep.Lockstep):
    """A Lockstep whose broadcast is a list: rank 0's record goes straight to a follower."""

    def __init__(self, rank: int, wire: list[bytes]):
        self.rank, self.size, self.broken, self.ranks = rank, 2, False, ()
        self._unchecked, self._since_gather = [], 0
        self._record_seconds = 0.0
        self.wire = wire

    def _share(self, data):
        if data is not None:
            self.wire.append(data)
            return data
        return self.wire.pop(0)


def test_a_record_carries_the_commands_whole_and_the_tokens_to_check():
    wire: list[bytes] = []
    leader, follower = Channel(0, wire), Channel(1, wire)
    request = GenerationRequest([1, 2, 3], 9, Sampling(temperature=0.7, seed=5),
                                grammar=GRAMMAR, top_logprobs=2, cache_key="k")
    leader.sampled(4, 17)
    follower.sampled(4, 17)
    sent = leader.lead(lockstep.StepRecord((Insert(4, request), Remove(2)), ((4, 1),), 64,
                                           run=True))
    got = follower.follow()
    assert got == sent and got.commands[0].request == request
    assert got.check == ((4, 17),) and got.chunk == 64 and got.reuse == ((4, 1),)


def test_a_follower_that_sampled_another_token_stops():
    wire: list[bytes] = []
    leader, follower = Channel(0, wire), Channel(1, wire)
    leader.sampled(1, 5)
    follower.sampled(1, 6)
    leader.lead(lockstep.StepRecord(run=True))
    with pytest.raises(lockstep.Diverged, match="rank 1 sampled"):
        follower.follow()


def test_figures_are_gathered_every_so_many_forward_passes():
    wire: list[bytes] = []
    leader = Channel(0, wire)
    flags = [leader.lead(lockstep.StepRecord(run=True)).gather
             for _ in range(2 * lockstep.GATHER_EVERY)]
    assert flags.count(True) == 2 and flags[lockstep.GATHER_EVERY - 1]
    assert not leader.lead(lockstep.StepRecord(stop=True)).gather


def test_a_long_record_survives_the_frame(monkeypatch):
    """Past FRAME bytes the rest goes in a second collective: the record is whole."""
    record = lockstep.StepRecord((Insert(1, GenerationRequest(list(range(5000)), 3)),))
    assert len(pickle.dumps(record)) > lockstep.FRAME
    wire: list[bytes] = []
    Channel(0, wire).lead(record)
    assert Channel(1, wire).follow().commands == record.commands


class Group:
    def __init__(self, size: int):
        self._size = size

    def size(self) -> int:
        return self._size


def test_what_cannot_be_sharded_is_said_in_one_line():
    from triode.model.loading import BUNDLED_PATH, load

    model, _ = load(str(BUNDLED_PATH))
    with pytest.raises(SettingsError, match="3 attention heads do not split evenly over 2"):
        lockstep.shard(model, "tensor", Group(2))
    with pytest.raises(SettingsError, match=r"has no pipeline\(\)"):
        lockstep.shard(model, "pipeline", Group(2))


def test_a_pipeline_needs_a_layer_per_rank(tmp_path):
    from mlx_lm.utils import load_model

    from tests.fixtures.distributed import build_qwen2

    model, _ = load_model(build_qwen2(tmp_path / "q"), lazy=True)
    with pytest.raises(SettingsError, match="4 layers cannot be split over 5 ranks"):
        lockstep.shard(model, "pipeline", Group(5))


# ---- the prompt cache counted in tokens ------------------------------------------------------

def kv(tokens: int):
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 1, tokens, 4)), mx.zeros((1, 1, tokens, 4)))
    return [c]


def held(cache) -> list[int]:
    return [len(tokens) for _, tokens, _ in cache.entries()]


def test_a_token_budget_keeps_exactly_up_to_it_and_evicts_the_oldest_past_it():
    from triode.model.prompt_cache import PromptCache

    cache = PromptCache(1 << 40, max_tokens=10)
    cache.keep(list(range(100, 104)), kv(4))
    cache.keep(list(range(200, 206)), kv(6))
    assert held(cache) == [4, 6]          # exactly at the budget: both stay
    cache.keep([300], kv(1))              # one over: the oldest goes
    assert held(cache) == [6, 1]
    cache.keep(list(range(400, 411)), kv(11))   # never fits: not kept, nothing evicted
    assert held(cache) == [6, 1]


def test_a_zero_token_budget_keeps_nothing():
    from triode.model.prompt_cache import PromptCache

    cache = PromptCache(1 << 40, max_tokens=0)
    cache.keep([1, 2], kv(2))
    assert held(cache) == []
