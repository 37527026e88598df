"""A long prompt arriving while a sequence decodes, on the real engine and the bundled model:
it is prefilled in chunks between decode steps (the decoding sequence keeps getting tokens),
and chunking changes no output."""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core")

from triode.model.engine import Engine, EngineOptions, Insert, StepOutput  # noqa: E402
from triode.model.loading import BUNDLED_PATH, load  # noqa: E402
from triode.model.request import GenerationRequest, Sampling  # noqa: E402

GREEDY = Sampling(temperature=0.0)
LONG_PROMPT_TOKENS = 1200


class Done(Exception):
    pass


def run(prefill_chunk: int, short: list[int], long: list[int], *, insert_after: int = 3
        ) -> tuple[dict[int, list[int]], int]:
    """Decodes `short` (uid 1); after its `insert_after`-th token inserts `long` (uid 2).
    Returns every sequence's tokens and how many tokens uid 1 got between that insert and
    uid 2's first token."""
    engine = Engine(EngineOptions(model=str(BUNDLED_PATH), parallel=4,
                                  prefill_chunk=prefill_chunk))
    tokens: dict[int, list[int]] = {1: [], 2: []}
    finished: set[int] = set()
    state = {"inserted": False, "between": 0, "long_started": False}

    def exchange(outputs: list[StepOutput], idle: bool, cache: object,
                 speculation: object = None) -> list[Insert]:
        commands = []
        for out in outputs:
            if out.finish_reason != "stop":
                tokens[out.uid].append(out.token)
            if out.finish_reason is not None:
                finished.add(out.uid)
            if out.uid == 1 and state["inserted"] and not state["long_started"]:
                state["between"] += 1
            if out.uid == 2:
                state["long_started"] = True
        if not state["inserted"] and len(tokens[1]) >= insert_after:
            state["inserted"] = True
            commands.append(Insert(2, GenerationRequest(prompt=long, max_tokens=8,
                                                        sampling=GREEDY)))
        if finished == {1, 2}:
            raise Done
        return commands

    started = {"first": True}

    def first_exchange(outputs, idle, cache, speculation=None):
        if started["first"]:
            started["first"] = False
            return [Insert(1, GenerationRequest(prompt=short, max_tokens=120, sampling=GREEDY))]
        return exchange(outputs, idle, cache)

    with pytest.raises(Done):
        engine.run(first_exchange, lambda info, tokenizer: None)
    return tokens, state["between"]


@pytest.fixture(scope="module")
def prompts():
    _, tokenizer = load(str(BUNDLED_PATH))   # triode's loader: it trusts the bundled model

    def render(text: str) -> list[int]:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                  add_generation_prompt=True))

    words = "amber kite violet river copper lantern".split()
    short = render("Reply with: " + " ".join(words[i % 6] for i in range(40)))
    filler = " ".join(words[(i * 7) % 6] + str(i % 10) for i in range(280))
    long = render("Reply with: marble " + filler)
    assert LONG_PROMPT_TOKENS <= len(long) < 2048    # one chunk of mlx-lm's default size
    return short, long


def test_a_long_prompt_is_prefilled_between_decode_steps(prompts):
    short, long = prompts
    _, between = run(32, short, long)
    # In chunks of 32: len(long) / 32 steps, each also a decode step of uid 1.
    assert between >= len(long) // 32 - 1


def test_mlx_lm_chunks_of_2048_stall_the_decoding_sequence(prompts):
    short, long = prompts
    _, between = run(2048, short, long)
    # One step prefills the whole prompt (but its last token); two more bring its first
    # token out of mlx-lm's pipeline: uid 1 gets one token per step meanwhile.
    assert between <= 3


def test_chunking_changes_no_output(prompts):
    short, long = prompts
    chunked, _ = run(32, short, long)
    whole, _ = run(2048, short, long)
    assert chunked == whole
    assert len(chunked[1]) > 40 and chunked[2]
