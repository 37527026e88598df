"""The parts of --distributed that need no second process: the step record's trip, the
divergence check, the sharding refusals, and the prompt cache counted in tokens (whose
keeping and evicting every rank must do alike)."""

from __future__ import annotations

import socket

import pytest

from triode.errors import SettingsError
from triode.model import lockstep
from triode.model.constraints import Grammar
from triode.model.engine import Insert, Remove
from triode.model.request import GenerationRequest, Sampling


GRAMMAR = Grammar('start: "<tool_call>" /[a-z]+/', (("TC", "<tool_call>"),))


class Group:
    def __init__(self, size: int, rank: int = 0):
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def linked(followers: int = 1) -> tuple[lockstep.Lockstep, list[lockstep.Lockstep]]:
    """Rank 0 and its followers over real control links (socket pairs)."""
    leader = lockstep.Lockstep(Group(followers + 1), None)
    others = []
    for rank in range(1, followers + 1):
        mine, theirs = socket.socketpair()
        leader._links.append(mine)
        follower = lockstep.Lockstep(Group(followers + 1, rank), None)
        follower._links = [theirs]
        others.append(follower)
    return leader, others


def test_a_record_carries_the_commands_whole_and_the_tokens_to_check():
    leader, (follower,) = linked()
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
    leader, (follower,) = linked()
    leader.sampled(1, 5)
    follower.sampled(1, 6)
    leader.lead(lockstep.StepRecord(run=True))
    with pytest.raises(lockstep.Diverged, match="rank 1 sampled"):
        follower.follow()


def test_a_speculative_step_s_choice_is_rank_0_s():
    leader, followers = linked(2)
    leader.lead(lockstep.StepRecord(run=True))
    assert leader.decide([[5, 6], []]) == [[5, 6], []]
    assert leader.decide(None) is None
    for follower in followers:
        assert follower.follow().run
        assert follower.decide(None) == [[5, 6], []]   # whatever it would have chosen
        assert follower.decide([[1]]) is None


def test_figures_are_gathered_every_so_many_forward_passes():
    leader, _ = linked()
    flags = [leader.lead(lockstep.StepRecord(run=True)).gather
             for _ in range(2 * lockstep.GATHER_EVERY)]
    assert flags.count(True) == 2 and flags[lockstep.GATHER_EVERY - 1]
    assert not leader.lead(lockstep.StepRecord(stop=True)).gather


def test_a_long_record_reaches_every_follower_whole():
    record = lockstep.StepRecord((Insert(1, GenerationRequest(list(range(50_000)), 3)),))
    leader, followers = linked(3)
    leader.lead(record)
    assert all(f.follow().commands == record.commands for f in followers)


def test_a_follower_gone_breaks_the_group_at_the_next_step():
    leader, (follower,) = linked()
    follower.close()
    with pytest.raises(ConnectionError, match="rank 1 closed its control link"):
        leader.lead(lockstep.StepRecord(run=True))
    assert leader.broken


def test_rank_0_gone_ends_a_follower():
    leader, (follower,) = linked()
    leader.close()
    with pytest.raises(ConnectionError, match="the control link to rank 0 broke"):
        follower.follow()


def test_rank_0_s_address_comes_from_the_launcher(tmp_path, monkeypatch):
    hosts = tmp_path / "hosts.json"
    hosts.write_text('[["10.0.0.7:5000"], ["10.0.0.8:5000"]]')
    monkeypatch.setenv("MLX_HOSTFILE", str(hosts))
    assert lockstep.control_address() == "10.0.0.7"
    assert lockstep.control_address("192.168.1.2") == "192.168.1.2"
    monkeypatch.delenv("MLX_HOSTFILE")
    monkeypatch.setenv("MLX_JACCL_COORDINATOR", "10.1.1.1:32323")
    assert lockstep.control_address() == "10.1.1.1"
    monkeypatch.delenv("MLX_JACCL_COORDINATOR")
    with pytest.raises(SettingsError, match="--distributed-control"):
        lockstep.control_address()


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


def test_a_vision_model_is_refused_before_anything_loads(tmp_path):
    from tests.fixtures import vlm
    from triode.settings import resolve
    from triode.system import checked_catalog

    directory = vlm.build(tmp_path / "llava")
    with pytest.raises(SettingsError, match="is a vision model"):
        checked_catalog(resolve({"distributed": "tensor", "model": (str(directory),)}, {}))
    assert checked_catalog(resolve({"model": (str(directory),)}, {}))   # alone it serves
