"""The disk tier on the real engine and the bundled model: an engine's end writes its prompt
cache, a fresh engine prefills from the file, exactly, and a load the disk has not finished
never holds up the sequences that are decoding."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("mlx.core")

from triode.model import disk_cache  # noqa: E402
from triode.model.engine import Engine, EngineOptions, Insert, StepOutput  # noqa: E402
from triode.model.loading import BUNDLED_PATH, load  # noqa: E402
from triode.model.request import GenerationRequest, Sampling  # noqa: E402

GREEDY = Sampling(temperature=0.0)
STALL_LIMIT = 60.0   # seconds the stalled reader waits for the test to open it
WORDS = "amber kite violet river copper lantern".split()


class Done(Exception):
    pass


@pytest.fixture(scope="module")
def prompts():
    _, tokenizer = load(str(BUNDLED_PATH))

    def render(text: str) -> list[int]:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                  add_generation_prompt=True))

    short = render("Reply with: " + " ".join(WORDS[i % 6] for i in range(40)))
    long = render("Reply with: marble " + " ".join(WORDS[(i * 7) % 6] + str(i % 10)
                                                   for i in range(60)))
    return short, long


def engine(directory) -> Engine:
    return Engine(EngineOptions(model=str(BUNDLED_PATH), parallel=4, prompt_cache_bytes=1 << 28,
                                prompt_cache_dir=str(directory),
                                prompt_cache_disk_bytes=1 << 30))


def request(prompt: list[int], max_tokens: int) -> GenerationRequest:
    return GenerationRequest(prompt=prompt, max_tokens=max_tokens, sampling=GREEDY)


def test_a_pending_load_does_not_hold_up_running_sequences(tmp_path, prompts, monkeypatch):
    """Engine 1 answers `long` and, at its end, writes its cache. Engine 2 decodes `short`;
    `long` arrives and its file is read by a reader the test holds shut until `short` has
    got 5 more tokens (a stalled disk): the step loop goes on meanwhile. Then `long` starts
    from the file (all but its last prompt token) and answers as engine 1 did."""
    short, long = prompts
    first: list[int] = []

    def once(outputs: list[StepOutput], idle: bool, cache: object,
             speculation: object = None) -> list[Insert]:
        if not first and not outputs:
            first.append(-1)
            return [Insert(7, request(long, 12))]
        first.extend(o.token for o in outputs if o.finish_reason != "stop")
        if any(o.finish_reason for o in outputs):
            raise Done
        return []

    with pytest.raises(Done):
        engine(tmp_path).run(once, lambda info, tokenizer: None)
    answer = first[1:]
    assert list(tmp_path.glob("*/*.kv"))

    gate = threading.Event()
    real = disk_cache.read_arrays

    def stalled(path, key):
        if not gate.wait(STALL_LIMIT):   # the step loop stopped: the load fails, no hit
            raise OSError("the test's gate was never opened")
        return real(path, key)

    monkeypatch.setattr(disk_cache, "read_arrays", stalled)
    tokens: dict[int, list[int]] = {1: [], 2: []}
    state = {"started": False, "inserted": False, "while_loading": 0, "cached": None}
    finished: set[int] = set()

    def exchange(outputs: list[StepOutput], idle: bool, cache: object, speculation: object = None) -> list[Insert]:
        if not state["started"]:
            state["started"] = True
            return [Insert(1, request(short, 200))]
        commands = []
        for out in outputs:
            if out.finish_reason != "stop":
                tokens[out.uid].append(out.token)
            if out.finish_reason is not None:
                finished.add(out.uid)
            if out.uid == 2 and state["cached"] is None:
                state["cached"] = out.cached_tokens
            if out.uid == 1 and state["inserted"] and not gate.is_set():
                state["while_loading"] += 1
                if state["while_loading"] == 5:
                    gate.set()
        if not state["inserted"] and len(tokens[1]) >= 2:
            state["inserted"] = True
            commands.append(Insert(2, request(long, 12)))
        if finished == {1, 2}:
            raise Done
        if 1 in finished and not gate.is_set():
            raise AssertionError("`short` ended before 5 tokens came while the load waited")
        return commands

    try:
        with pytest.raises(Done):
            engine(tmp_path).run(exchange, lambda info, tokenizer: None)
    finally:
        gate.set()
    assert state["while_loading"] == 5
    assert state["cached"] == len(long) - 1
    assert tokens[2] == answer
