"""Prompt-lookup speculative decoding (speculative.py) against plain decoding, on real models:
the bundled one and small random-weight qwen3 models. Greedy output must be identical token
for token, sampled output distributed the same, and what finished sequences leave for the
prompt cache must match their tokens."""

import random

import pytest

mx = pytest.importorskip("mlx.core")

from mlx_lm.generate import BatchGenerator  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402
from mlx_lm.sample_utils import make_sampler  # noqa: E402

from triode.model import speculative  # noqa: E402
from triode.model.engine import sampler_for  # noqa: E402
from triode.model.loading import BUNDLED_PATH, load  # noqa: E402
from triode.model.request import Sampling  # noqa: E402

WORDS = ("apple river stone cloud violet copper lantern meadow harbor pepper falcon maple "
         "canyon velvet ember glacier orbit tulip marble cedar").split()


@pytest.fixture(scope="module")
def bundled():
    return load(str(BUNDLED_PATH))


def random_model(vocab: int = 1035, seed: int = 0, hidden: int = 64, layers: int = 2):
    from mlx_lm.models.qwen3 import Model, ModelArgs

    mx.random.seed(seed)
    model = Model(ModelArgs(model_type="qwen3", hidden_size=hidden, num_hidden_layers=layers,
                            intermediate_size=2 * hidden, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                            vocab_size=vocab, max_position_embeddings=4096,
                            rope_theta=10000.0, tie_word_embeddings=True))
    mx.eval(model.parameters())
    return model


def encode(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(rendered, add_special_tokens=False))


def copy_prompts(tokenizer, lengths, seed=0) -> list[list[int]]:
    rng = random.Random(seed)
    return [encode(tokenizer, "Reply with: " + " ".join(rng.choice(WORDS) for _ in range(n)))
            for n in lengths]


def decode(model, prompts, max_tokens, *, spec, parallel=8, stop=(), samplers=None,
           remove_after=None, knee=8.0):
    """Runs `prompts` through a BatchGenerator, `parallel` at a time (the rest join as others
    finish): ({prompt index: responses}, the speculative batch's counts)."""
    generator = BatchGenerator(model, stop_tokens=[[t] for t in stop],
                               completion_batch_size=parallel,
                               prefill_batch_size=min(parallel, 8))
    if spec:
        speculative.install(generator, knee, learn=False)   # no timings: deterministic
    max_tokens = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
    waiting = list(range(len(prompts)))
    index: dict[int, int] = {}
    out: dict[int, list] = {i: [] for i in range(len(prompts))}
    running: set[int] = set()
    steps = 0
    while waiting or running:
        while waiting and len(running) < parallel:
            i = waiting.pop(0)
            kw = {"samplers": [samplers[i]]} if samplers else {}
            (uid,) = generator.insert([prompts[i]], [max_tokens[i]], **kw)
            index[uid] = i
            running.add(uid)
        _, responses = generator.next()
        steps += 1
        for r in responses:
            assert r.uid in running, "a token after its sequence finished"
            out[index[r.uid]].append(r)
            if r.finish_reason is not None:
                running.discard(r.uid)
        if remove_after is not None and steps == remove_after[1]:
            uid = next(u for u, i in index.items() if i == remove_after[0])
            if uid in running:
                generator.remove([uid])
                running.discard(uid)
    counts = dict(getattr(generator._generation_batch, "counts", {}))
    generator.close()
    return out, counts


def tokens(out):
    return {i: [r.token for r in rs] for i, rs in out.items()}


def assert_same(model, prompts, max_tokens, **kw):
    plain, _ = decode(model, prompts, max_tokens, spec=False, **kw)
    fast, counts = decode(model, prompts, max_tokens, spec=True, **kw)
    assert tokens(fast) == tokens(plain)
    for i in plain:
        assert [r.finish_reason for r in fast[i]] == [r.finish_reason for r in plain[i]]
        for a, b in zip(plain[i], fast[i]):
            assert mx.allclose(a.logprobs, b.logprobs, atol=1e-4).item()
    return fast, counts


def assert_kept_cache_matches(model, out):
    """Each finished sequence's KV cache holds exactly its all_tokens, as a prefill of them
    computes."""
    for rs in out.values():
        last = rs[-1]
        if last.prompt_cache is None:
            continue
        assert last.prompt_cache[0].offset == len(last.all_tokens)
        fresh = make_prompt_cache(model)
        mx.eval(model(mx.array([last.all_tokens]), cache=fresh))
        n = len(last.all_tokens)
        for kept, full in zip(last.prompt_cache, fresh):
            for x, y in ((kept.keys, full.keys), (kept.values, full.values)):
                assert mx.allclose(x[..., :n, :], y[..., :n, :], atol=1e-4).item()


def test_greedy_copy_prompts_are_identical_and_drafts_are_accepted(bundled):
    model, tokenizer = bundled
    prompts = copy_prompts(tokenizer, [6, 12, 3, 20, 9])
    out, counts = assert_same(model, prompts, 120, stop=tokenizer.eos_token_ids)
    assert counts["accepted"] > 0 and counts["speculative"] > 0
    assert_kept_cache_matches(model, out)
    # The copy ends with the end-of-turn token, drafted from the prompt's: a stop inside an
    # accepted run.
    assert sum(rs[-1].finish_reason == "stop" for rs in out.values()) >= 3


def test_a_single_sequence_and_other_prompts(bundled):
    model, tokenizer = bundled
    for prompt in (copy_prompts(tokenizer, [15], seed=3)[0],
                   encode(tokenizer, "Think, then reply with: lantern meadow"),
                   encode(tokenizer, "Answer in JSON with key color and value violet")):
        assert_same(model, [prompt], 80, stop=tokenizer.eos_token_ids)


def test_sequences_join_and_leave_mid_run(bundled):
    """Two slots, seven sequences of different lengths: rows finish and new ones join while
    others have holes in the cache."""
    model, tokenizer = bundled
    prompts = copy_prompts(tokenizer, [4, 18, 7, 25, 2, 11, 16], seed=5)
    out, _ = assert_same(model, prompts, 90, parallel=2, stop=tokenizer.eos_token_ids)
    assert_kept_cache_matches(model, out)


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 9])
def test_max_tokens_inside_an_accepted_run(bundled, max_tokens):
    model, tokenizer = bundled
    prompts = copy_prompts(tokenizer, [20, 14], seed=7)
    out, _ = assert_same(model, prompts, max_tokens, stop=tokenizer.eos_token_ids)
    assert all(len(rs) == max_tokens and rs[-1].finish_reason == "length"
               for rs in out.values())
    assert_kept_cache_matches(model, out)


def test_removing_a_sequence_mid_run(bundled):
    model, tokenizer = bundled
    prompts = copy_prompts(tokenizer, [20, 14, 17], seed=9)
    kw = dict(stop=tokenizer.eos_token_ids, remove_after=(1, 6))
    plain = tokens(decode(model, prompts, 60, spec=False, **kw)[0])
    fast, counts = decode(model, prompts, 60, spec=True, **kw)
    fast_tokens = tokens(fast)
    assert fast[1][-1].finish_reason is None and counts["speculative"] > 0
    # Removed after six steps, it got further with speculation; the others are unchanged.
    assert fast_tokens[1][:len(plain[1])] == plain[1]
    assert (fast_tokens[0], fast_tokens[2]) == (plain[0], plain[2])


@pytest.mark.parametrize("compact_at", [None, 1])
def test_random_model_loops_are_drafted_and_the_cache_compacts(monkeypatch, compact_at):
    """A random-weight model falls into loops: long accepted runs, and a stop token that
    shows up inside a run; compacting at every hole must change nothing either."""
    if compact_at is not None:
        monkeypatch.setattr(speculative, "COMPACT_MIN", compact_at)
        monkeypatch.setattr(speculative, "COMPACT_SHARE", 0.0)
    model = random_model()
    rng = random.Random(1)
    prompts = [[rng.randrange(1035) for _ in range(n)] for n in (5, 40, 17, 60)]
    plain, _ = decode(model, prompts, 200, spec=False)
    stop = plain[0][30].token   # a token the first sequence generates mid-run
    out, counts = assert_same(model, prompts, [200, 150, 180, 120], stop=[stop], parallel=3)
    assert counts["accepted"] > 50
    assert (counts["compact"] > 0) == (compact_at is not None)
    assert_kept_cache_matches(model, out)


def test_seeded_sampling_is_the_same_with_and_without_speculation(bundled):
    """A seed's sampler splits its key once per emitted token, drafted or not."""
    model, tokenizer = bundled
    prompts = copy_prompts(tokenizer, [15, 8], seed=11)
    sampling = [Sampling(temperature=0.7, seed=s, top_p=0.9) for s in (1, 2)]
    plain, _ = decode(model, prompts, 60, spec=False, stop=tokenizer.eos_token_ids,
                      samplers=[sampler_for(s) for s in sampling])
    fast, counts = decode(model, prompts, 60, spec=True, stop=tokenizer.eos_token_ids,
                          samplers=[sampler_for(s) for s in sampling])
    assert tokens(fast) == tokens(plain)
    assert counts["accepted"] > 0


def chi_square(a: list[int], b: list[int], cells: int) -> float:
    """Two-sample chi-square statistic of two equally sized samples over `cells` values."""
    stat = 0.0
    for v in range(cells):
        x, y = a.count(v), b.count(v)
        if x + y:
            stat += (x - y) ** 2 / (x + y)
    return stat


def test_sampling_keeps_the_distribution():
    """Tokens 2-4 of many sampled sequences (drafted and verified positions: token 1 comes
    from the prefill) with and without speculation: two-sample chi-square per position over
    a 12-token vocabulary, well under the 0.001 critical value for 11 degrees of freedom."""
    vocab = 12
    model = random_model(vocab=vocab, seed=3, hidden=32)
    rng = random.Random(2)
    prompt = [rng.randrange(vocab) for _ in range(48)]   # every bigram recurs: drafts
    sampler = make_sampler(temp=1.5, top_k=8, min_p=0.02)
    n = 1500
    mx.random.seed(0)
    plain, _ = decode(model, [prompt] * n, 4, spec=False, parallel=250,
                      samplers=[sampler] * n)
    mx.random.seed(1)
    fast, counts = decode(model, [prompt] * n, 4, spec=True, parallel=250,
                          samplers=[sampler] * n, knee=1e6)   # always draft
    assert counts["drafted"] > n and counts["accepted"] > 0
    for position in (1, 2, 3):
        a = [rs[position].token for rs in plain.values()]
        b = [rs[position].token for rs in fast.values()]
        assert chi_square(a, b, vocab) < 31.3


def test_plan_drafts_only_when_it_pays():
    # A one-row batch on a step-cost-dominated model: drafting pays.
    assert speculative.plan([4], [0.75], knee=30.0) != [0]
    # Nothing offered, or nothing ever accepted: a plain step.
    assert speculative.plan([0, 0], [0.9, 0.9], knee=30.0) == [0, 0]
    assert speculative.plan([4, 4], [0.0, 0.0], knee=30.0) == [0, 0]
    # A wide batch on a per-token-cost-dominated model: one row's draft does not pay.
    assert speculative.plan([8] + [0] * 31, [0.75] * 32, knee=1.0) == [0] * 32


def test_plan_needs_more_promise_under_a_higher_advantage():
    """A draft worth a step at the usual advantage is declined when a speculative step must
    promise much more than a plain one."""
    offers, acceptance = [4] * 8, [0.6] * 8
    assert any(speculative.plan(offers, acceptance, knee=30.0))
    assert not any(speculative.plan(offers, acceptance, knee=30.0,
                                    advantage=speculative.PLAIN_ADVANTAGE * 4))


PLAIN_STEP = 0.005   # seconds of a plain step of one row in the guard tests


def plain_steps(guard, n: int, rows: int = 1, seconds: float = PLAIN_STEP) -> None:
    for _ in range(n):
        guard.step(False, rows, rows, seconds)


def window(guard, speedup: float, rows: int = 1, steps: int = speculative.GUARD_WINDOW
           ) -> None:
    """One window of runs of two speculative steps (and the plain step after each) whose
    tokens per second is `speedup` times plain decoding's at `rows` rows."""
    for _ in range(steps // 2):
        # 2 speculative steps emitting 3 tokens a row, then the plain step after: 7 tokens a
        # row in what `speedup` makes of it.
        seconds = 7 * PLAIN_STEP / speedup
        guard.step(True, rows, 3 * rows, seconds * 0.45)
        guard.step(True, rows, 3 * rows, seconds * 0.45)
        guard.step(False, rows, rows, seconds * 0.10)


def test_guard_keeps_drafting_on_while_drafts_are_accepted():
    guard = speculative.Guard()
    plain_steps(guard, speculative.GUARD_PLAIN)
    for _ in range(10):
        window(guard, 2.5)
    width = guard.widths[1]
    assert width.state == "on" and width.windows == 10 and width.losses == 0
    assert width.ratio == pytest.approx(2.5)
    assert guard.allows(1)


def test_guard_is_not_switched_off_by_noise():
    """Losing windows that do not hold (a loaded machine's moment) leave drafting on; so
    does anything short of GUARD_LOSSES losing windows in a row."""
    guard = speculative.Guard()
    plain_steps(guard, speculative.GUARD_PLAIN)
    for _ in range(10):
        for _ in range(speculative.GUARD_LOSSES - 1):
            window(guard, 0.5)
        window(guard, 1.6)
    assert guard.widths[1].state == "on"
    # Plain steps slowed by the same noise do not flip it either: the reference is a median.
    plain_steps(guard, speculative.GUARD_PLAIN // 4, seconds=20 * PLAIN_STEP)
    window(guard, 1.6)
    assert guard.widths[1].losses == 0 and guard.allows(1)


def test_guard_switches_off_on_sustained_loss_and_probes_again():
    guard = speculative.Guard()
    plain_steps(guard, speculative.GUARD_PLAIN, rows=8)
    for _ in range(speculative.GUARD_LOSSES - 1):
        window(guard, 0.7, rows=8)
    assert guard.allows(8)   # one window short: still on
    window(guard, 0.7, rows=8)
    assert guard.widths[8].state == "off" and not guard.allows(8)
    assert guard.allows(1)   # another width is judged on its own steps
    # Off: a probe after GUARD_PROBE_EVERY plain steps; one that loses keeps it off and
    # doubles the wait for the next.
    plain_steps(guard, speculative.GUARD_PROBE_EVERY - 1, rows=8)
    assert not guard.allows(8)
    plain_steps(guard, 1, rows=8)
    assert guard.widths[8].state == "probing" and guard.allows(8)
    window(guard, 0.7, rows=8)
    assert guard.widths[8].state == "off"
    plain_steps(guard, speculative.GUARD_PROBE_EVERY, rows=8)
    assert not guard.allows(8)
    plain_steps(guard, speculative.GUARD_PROBE_EVERY, rows=8)
    assert guard.widths[8].state == "probing"
    # A probe that pays turns drafting back on.
    window(guard, 1.3, rows=8)
    assert guard.widths[8].state == "on" and guard.allows(8)


def test_guard_judges_only_what_it_can_compare():
    guard = speculative.Guard()
    for _ in range(speculative.GUARD_LOSSES + 1):
        window(guard, 0.2)   # losing, but no plain steps at this width seen yet
    assert guard.widths[1].state == "on" and guard.widths[1].windows == 0
    plain_steps(guard, speculative.GUARD_PLAIN)
    for _ in range(speculative.GUARD_LOSSES * speculative.GUARD_WINDOW):
        guard.step(True, 1, 1, 1.0)
        guard.untimed()   # the batch changed mid-run: not counted
        guard.step(False, 1, 1, PLAIN_STEP)
    assert guard.widths[1].windows == 0 and guard.allows(1)
    for _ in range(speculative.GUARD_LOSSES):
        window(guard, 0.2, rows=4)   # another width: its own plain steps are the reference
    assert guard.widths[4].windows == 0 and guard.allows(4)


def test_step_cost_fit_finds_the_knee():
    cost = speculative.StepCost(32.0)
    assert cost.knee == 32.0   # nothing seen yet: the calibration
    for n in (8, 16, 8, 40, 8, 24, 8, 16, 72, 8, 8, 32) * 2:
        cost.observe(n, 0.010 + 0.001 * n)   # fixed 10 ms, 1 ms a token
    assert cost.knee == pytest.approx(10.0, rel=1e-3)
    cost.observe(8, 5.0)   # prefill or a pause, not a step: ignored
    assert cost.knee == pytest.approx(10.0, rel=1e-3)
    flat = speculative.StepCost(32.0)
    for n in (8, 16) * 20:
        flat.observe(n, 0.010)   # no cost per token: as far from the calibration as allowed
    assert flat.knee == 32.0 * speculative.COST_FIT_UP


def test_ngram_index_proposes_what_followed_the_latest_occurrence():
    index = speculative.NgramIndex([1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3])
    assert index.propose(3) == [7, 8, 1]
    index.catch_up(index.tokens + [5])
    assert index.propose(2) == []   # (2, 3, 5) and (3, 5) never occurred before
