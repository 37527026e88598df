#!/usr/bin/env python
"""Prompt-lookup speculative decoding against plain decoding, in process (issue 16).

Both ways drive mlx-lm's `BatchGenerator` as triode's engine builds it (the engine's stop
tokens and batch sizes, MKL with the engine's thread cap); the speculative way has
`triode.model.speculative.install`ed on it, as `--speculative ngram` does. Same prompts,
greedy decoding, the same max tokens; C streams means C sequences decoded together from the
start. Every run also checks that the two ways generated the same tokens.

Workloads:
    edit     a ~400-token passage of words as the system message, and `Reply with: <an
             excerpt of it, two words changed>` (the bundled model's copy task; it copies
             about a dozen words well, so the output is short and prefill weighs heavily)
    random   prompts of random tokens with nothing repeated: nothing to copy from the prompt
             (greedy output may still repeat itself, which speculation then drafts)
    sampled  the random prompts at temperature 1: random text, whose drafts fail (the two
             ways sample different tokens, so end-of-sequence is ignored and every sequence
             runs to --max-tokens: the same work both ways)

Models: `bundled` (the 2.1M-parameter tiny model) and `random` (bench/throughput.py's 76M
random-weight qwen3 with the bundled tokenizer, built in a temporary directory).

    .venv/bin/python bench/speculative.py                        # everything below
    .venv/bin/python bench/speculative.py --models bundled --streams 1,8 --workloads edit

Ratios are speculative / plain tokens per second from ONE run (the machine is noisy, so only
ratios within a run mean anything); the Markdown table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import RANDOM_SIZES, WORDS, create_random_model, log  # noqa: E402

from triode.model import blas  # noqa: E402

blas.preload_blas()

PASSAGE_WORDS = 100      # about 400 tokens with the bundled tokenizer
EXCERPT_WORDS = 12       # the part to repeat: about as long as the bundled model copies well
EDITS = 2                # words of the excerpt changed in the instruction


def edit_prompt(tokenizer, seed: int) -> list[int]:
    """The passage as the system message; the user asks for an excerpt of it back with a
    few words changed."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(PASSAGE_WORDS)]
    start = rng.randrange(PASSAGE_WORDS - EXCERPT_WORDS)
    excerpt = words[start:start + EXCERPT_WORDS]
    for i in rng.sample(range(EXCERPT_WORDS), EDITS):
        excerpt[i] = rng.choice(WORDS)
    return encode(tokenizer, [{"role": "system", "content": " ".join(words)},
                              {"role": "user", "content": "Reply with: " + " ".join(excerpt)}])


def random_prompt(tokenizer, seed: int, length: int = 64) -> list[int]:
    rng = random.Random(seed)
    vocab = [t for t in range(tokenizer.vocab_size) if t not in set(tokenizer.eos_token_ids)]
    return rng.sample(vocab, length)   # no token twice: no n-gram to look up


def encode(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False)
    return list(tokenizer.encode(rendered, add_special_tokens=False))


def decode_all(model, tokenizer, prompts: list[list[int]], streams: int, max_tokens: int,
               speculative: bool, knee: float | None, temperature: float = 0.0
               ) -> tuple[float, float, list[list[int]], dict[str, int]]:
    """Decodes `prompts`, `streams` at a time (the next starts as one finishes): (seconds
    from the first insert to the last token, seconds of them in decode steps, each prompt's
    tokens, speculation's counts)."""
    from mlx_lm.sample_utils import make_sampler

    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator

    from triode.model import speculative as spec

    stop = [] if temperature else [[t] for t in tokenizer.eos_token_ids]
    generator = BatchGenerator(model, stop_tokens=stop,
                               completion_batch_size=streams,
                               prefill_batch_size=min(streams, 8),
                               stream=mx.new_stream(mx.default_device()))
    if speculative:
        spec.install(generator, knee)
    sampler = make_sampler(temp=temperature)
    out: dict[int, list[int]] = {}
    uids: list[int] = []
    waiting = list(reversed(prompts))
    running: set[int] = set()
    start = time.perf_counter()
    decode = generator._counters.decode_time
    while waiting or running:
        while waiting and len(running) < streams:
            uids += generator.insert([waiting.pop()], [max_tokens], samplers=[sampler])
            running.add(uids[-1])
        _, responses = generator.next()
        for r in responses:
            out.setdefault(r.uid, []).append(r.token)
            if r.finish_reason is not None:
                running.discard(r.uid)
    seconds = time.perf_counter() - start
    decode = generator._counters.decode_time - decode
    counts = dict(getattr(generator._generation_batch, "counts", {}))
    generator.close()
    return seconds, decode, [out[u] for u in uids], counts


def median_run(runs: list[tuple]) -> tuple:
    """The run of median total time (its decode time, tokens and counts with it)."""
    return sorted(runs, key=lambda r: r[0])[len(runs) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="bundled,random")
    parser.add_argument("--streams", default="1,8,32")
    parser.add_argument("--workloads", default="edit,random,sampled")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--requests", type=int, default=3,
                        help="requests per stream (at least 8 in all)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each way, interleaved (plain, speculative, plain, ...); "
                        "each way's median time is reported")
    args = parser.parse_args()

    from triode.model import speculative as spec
    from triode.model.loading import BUNDLED_PATH, load

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models.split(","):
            if name == "bundled":
                path = BUNDLED_PATH
            else:
                log(f"building the {name} model")
                path = create_random_model(Path(scratch) / name, RANDOM_SIZES[name])
            model, tokenizer = load(str(path))
            hidden = getattr(model.args, "hidden_size", None)
            blas.set_threads(blas.auto_threads(hidden))
            knee = spec.calibrate(model)
            log(f"{name}: knee {knee:.1f} tokens")
            for workload in args.workloads.split(","):
                for streams in [int(s) for s in args.streams.split(",")]:
                    make = edit_prompt if workload == "edit" else random_prompt
                    temperature = 1.0 if workload == "sampled" else 0.0
                    count = max(8, streams * args.requests)
                    prompts = [make(tokenizer, seed) for seed in range(count)]
                    decode_all(model, tokenizer, prompts[:1], 1, 8, False, knee)   # warm up
                    runs = [decode_all(model, tokenizer, prompts, streams, args.max_tokens,
                                       fast, knee, temperature)
                            for _ in range(args.repeat) for fast in (False, True)]
                    (plain_s, plain_d, plain, _), (spec_s, spec_d, fast, counts) = (
                        median_run(runs[0::2]), median_run(runs[1::2]))
                    n_plain, n_fast = (sum(len(t) for t in out) for out in (plain, fast))
                    same = "yes" if plain == fast else "—" if temperature else "NO"
                    rows.append((name, workload, streams, n_plain, n_plain / plain_s,
                                 n_fast / spec_s, n_plain / plain_d, n_fast / spec_d, same))
                    log(f"{name} {workload} C={streams}: {n_plain}/{n_fast} tokens, plain "
                        f"{rows[-1][4]:.0f}/s, speculative {rows[-1][5]:.0f}/s "
                        f"({rows[-1][5] / rows[-1][4]:.2f}x; decode steps only "
                        f"{rows[-1][7] / rows[-1][6]:.2f}x), same tokens: {same}; {counts}")
    print("| model | workload | streams | tokens | plain tok/s | speculative tok/s | ratio | "
          "decode-only ratio | same tokens |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name, workload, streams, tokens, plain_rate, spec_rate, plain_d, spec_d, same in rows:
        print(f"| {name} | {workload} | {streams} | {tokens} | {plain_rate:.0f} | "
              f"{spec_rate:.0f} | {spec_rate / plain_rate:.2f}x | {spec_d / plain_d:.2f}x | "
              f"{same} |")
    return 0 if all(r[-1] != "NO" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
