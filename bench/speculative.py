#!/usr/bin/env python
"""Prompt-lookup speculative decoding against plain decoding, in process (issue 16).

Both ways drive mlx-lm's `BatchGenerator` as triode's engine builds it (the engine's stop
tokens and batch sizes, MKL with the engine's thread cap); the speculative way has
`triode.model.speculative.install`ed on it, as `--speculative ngram` does. Same prompts,
greedy decoding, the same max tokens; C streams means C sequences decoded together from the
start. Every run also checks that the two ways generated the same tokens.

Workloads:
    copy     `Reply with:` and 60-90 words (the long-copy task: the answer repeats the prompt)
    edit     a file (8 lines of 8 words) as the system message, and `Reply with:` the same
             file with two of its lines changed (an edit: the answer repeats most of both)
    excerpt  a ~400-token passage of words as the system message, and `Reply with: <an
             excerpt of it, two words changed>` (the bundled model copies about a dozen
             words well, so the output is short and prefill weighs heavily)
    random   prompts of random tokens with nothing repeated: nothing to copy from the prompt
             (greedy output may still repeat itself, which speculation then drafts)
    sampled  the random prompts at temperature 1: random text, whose drafts fail (the two
             ways sample different tokens, so end-of-sequence is ignored and every sequence
             runs to --max-tokens: the same work both ways)

Models: `bundled` (the 2.1M-parameter tiny model), `random` (bench/throughput.py's 76M
random-weight qwen3 with the bundled tokenizer, built in a temporary directory) and
`smollm2` (SmolLM2-135M-Instruct, a real model, run as the server runs it: float32 weights,
MKL's softmax). A real model gets real tasks in place of the bundled model's `Reply with:`:

    copy     "Repeat the following paragraph exactly, word for word:" and an English
             paragraph of 6-9 sentences (SmolLM2 repeats such a paragraph verbatim)
    edit     "Fix the typos in this text and write it again:" and a paragraph of 6-9
             sentences with three misspelled words (it writes the paragraph back, corrected)
    random   "Write a short story about ..." (new text: nothing in the prompt to copy)
    sampled  the same at temperature 1

    .venv/bin/python bench/speculative.py                        # everything below
    .venv/bin/python bench/speculative.py --models bundled --streams 1,8 --workloads edit
    .venv/bin/python bench/speculative.py --models "" --server --repeat 5   # servers only

Each row runs --repeat pairs of runs, plain and speculative; within a pair the two ways
take the prompts a group of C at a time, alternately (plain then speculative on the first
group, speculative then plain on the next, ...), each on its own generator kept for the
whole run. Each pair gives one ratio of speculative / plain tokens per second (the machine
is noisy, so only ratios measured side by side mean anything; interleaving by group puts
its drift on both ways alike), and the row shows their median and minimum. `--control`
runs the same rows with the second way decoding plainly too: what the machine's noise
alone does to the ratios. The Markdown table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import random
import statistics
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


LINES, LINE_WORDS, CHANGED_LINES = 8, 8, 2   # the edit task's file and its edit


def copy_prompt(tokenizer, seed: int) -> list[int]:
    """`Reply with:` and 60-90 words."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(rng.randint(60, 90))]
    return encode(tokenizer, [{"role": "user", "content": "Reply with: " + " ".join(words)}])


def file_edit_prompt(tokenizer, seed: int) -> list[int]:
    """A file as the system message; the user asks for it back with a few lines changed."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(LINE_WORDS)) for _ in range(LINES)]
    edited = list(lines)
    for i in rng.sample(range(LINES), CHANGED_LINES):
        edited[i] = " ".join(rng.choice(WORDS) for _ in range(LINE_WORDS))
    return encode(tokenizer, [{"role": "system", "content": "\n".join(lines)},
                              {"role": "user", "content": "Reply with: " + "\n".join(edited)}])


def excerpt_prompt(tokenizer, seed: int) -> list[int]:
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


PROMPTS = {"copy": copy_prompt, "edit": file_edit_prompt, "excerpt": excerpt_prompt,
           "random": random_prompt, "sampled": random_prompt}

SENTENCES = (
    "The lighthouse stood on a rocky point at the edge of the bay.",
    "Every evening the keeper climbed the narrow stairs and trimmed the wick.",
    "Ships far out at sea watched for its beam through the fog.",
    "The fishermen of the village mended their nets on the harbor wall.",
    "In spring the orchard behind the mill was white with blossom.",
    "The miller's daughter kept bees in a row of painted hives.",
    "A narrow road wound up the hill past the old stone church.",
    "Children raced their bicycles down it on summer afternoons.",
    "The baker opened his shop before dawn, and the smell of bread filled the square.",
    "Travelers arrived on the morning train with heavy bags and tired faces.",
    "The river was wide and slow where it passed the town.",
    "Herons stood in the shallows, waiting for fish to swim by.",
    "On market days the square filled with stalls of cheese, fruit and honey.",
    "An old clock in the tower struck every hour, a little late.",
    "The school had three classrooms and a small library full of maps.",
    "In winter the lake froze, and everyone went skating after lunch.",
    "The doctor visited the farms on a grey horse named Pepper.",
    "A storm in autumn once carried away the roof of the boat house.",
    "The village rebuilt it in a week, working from sunrise to dusk.",
    "At night the sky was so dark that the stars seemed close enough to touch.",
)
TYPOS = {"lighthouse": "lighthuose", "narrow": "narow", "village": "vilage",
         "orchard": "orchrad", "church": "chruch", "afternoons": "afternons",
         "morning": "mornign", "market": "makret", "library": "libary", "winter": "wintre",
         "autumn": "autunm", "stars": "stras", "square": "sqaure", "heavy": "heavey"}
STORY_TOPICS = ("a lost cat", "a clockmaker", "a desert caravan", "a space station",
                "a river boat", "a night market", "a mountain village", "a lighthouse")


def paragraph(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.sample(SENTENCES, rng.randint(6, 9)))


def real_copy_prompt(tokenizer, seed: int) -> list[int]:
    return encode(tokenizer, [{"role": "user", "content": "Repeat the following paragraph "
                               "exactly, word for word:\n\n" + paragraph(seed)}])


def real_edit_prompt(tokenizer, seed: int) -> list[int]:
    text = paragraph(seed)
    found = [w for w in TYPOS if w in text]
    for word in random.Random(seed).sample(found, min(3, len(found))):
        text = text.replace(word, TYPOS[word], 1)
    return encode(tokenizer, [{"role": "user", "content": "Fix the typos in this text and "
                               "write it again:\n\n" + text}])


def real_story_prompt(tokenizer, seed: int) -> list[int]:
    return encode(tokenizer, [{"role": "user", "content": "Write a short story about "
                               f"{STORY_TOPICS[seed % len(STORY_TOPICS)]} (number {seed})."}])


REAL_PROMPTS = {"copy": real_copy_prompt, "edit": real_edit_prompt,
                "random": real_story_prompt, "sampled": real_story_prompt}
REAL_MODELS = ("smollm2",)


def encode(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False)
    return list(tokenizer.encode(rendered, add_special_tokens=False))


class Way:
    """One way of decoding, plain or speculative: a BatchGenerator built as triode's engine
    builds it and kept across the prompts it is given (as a server keeps its engine's, so
    speculation's guard and cost fit carry over), with its times added up."""

    def __init__(self, model, tokenizer, streams: int, speculative: bool,
                 knee: float | None, temperature: float = 0.0):
        from mlx_lm.sample_utils import make_sampler

        import mlx.core as mx
        from mlx_lm.generate import BatchGenerator

        from triode.model import speculative as spec

        stop = [] if temperature else [[t] for t in tokenizer.eos_token_ids]
        self.generator = BatchGenerator(model, stop_tokens=stop,
                                        completion_batch_size=streams,
                                        prefill_batch_size=min(streams, 8),
                                        stream=mx.new_stream(mx.default_device()))
        if speculative:
            spec.install(self.generator, knee)
        self.sampler = make_sampler(temp=temperature)
        self.streams = streams
        self.seconds = 0.0    # from each run's first insert to its last token
        self.decode = 0.0     # of which in decode steps
        self.outputs: list[list[int]] = []

    def run(self, prompts: list[list[int]], max_tokens: int) -> None:
        """Decodes `prompts`, `streams` at a time (the next starts as one finishes)."""
        generator = self.generator
        out: dict[int, list[int]] = {}
        uids: list[int] = []
        waiting = list(reversed(prompts))
        running: set[int] = set()
        start = time.perf_counter()
        decode = generator._counters.decode_time
        while waiting or running:
            while waiting and len(running) < self.streams:
                uids += generator.insert([waiting.pop()], [max_tokens], samplers=[self.sampler])
                running.add(uids[-1])
            _, responses = generator.next()
            for r in responses:
                out.setdefault(r.uid, []).append(r.token)
                if r.finish_reason is not None:
                    running.discard(r.uid)
        self.seconds += time.perf_counter() - start
        self.decode += generator._counters.decode_time - decode
        self.outputs += [out[u] for u in uids]

    def counts(self) -> dict[str, int]:
        """Speculation's counts (none for plain decoding)."""
        return dict(getattr(self.generator._generation_batch, "counts", {}))

    def close(self) -> None:
        self.generator.close()


def decode_both(model, tokenizer, prompts: list[list[int]], streams: int, max_tokens: int,
                knee: float | None, temperature: float = 0.0, control: bool = False
                ) -> tuple[Way, Way]:
    """Both ways over `prompts`, interleaved a group of `streams` prompts at a time (plain
    first, then speculative first, ...), so that the machine's drift between groups falls on
    both alike. `control`: the second way decodes plainly too (the bench's noise floor)."""
    plain = Way(model, tokenizer, streams, False, knee, temperature)
    fast = Way(model, tokenizer, streams, not control, knee, temperature)
    for start in range(0, len(prompts), streams):
        group = prompts[start:start + streams]
        ways = (plain, fast) if (start // streams) % 2 == 0 else (fast, plain)
        for way in ways:
            way.run(group, max_tokens)
    plain.close()
    fast.close()
    return plain, fast


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="bundled,random")
    parser.add_argument("--streams", default="1,8,32")
    parser.add_argument("--workloads", default="copy,edit,random,sampled")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--requests", type=int, default=3,
                        help="requests per stream (at least 8 in all)")
    parser.add_argument("--server", action="store_true",
                        help="also the copy task through two real servers (`--speculative "
                        "off` and the default), streamed, one request at a time: decode "
                        "tokens per second from each response's first delta to its last")
    parser.add_argument("--server-model", default="bundled", choices=("bundled", *REAL_MODELS),
                        help="the model --server runs")
    parser.add_argument("--control", action="store_true",
                        help="decode plainly both ways (an A/A run): the ratios the machine's "
                        "noise alone gives each row, to read the speculative rows against")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each way, interleaved (plain, speculative, plain, ...); "
                        "each pair's ratio counts, the row shows their median and minimum")
    args = parser.parse_args()

    from triode.model import cpu_attention
    from triode.model import speculative as spec
    from triode.model.loading import BUNDLED_PATH, LoadOptions, load, load_model

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in filter(None, args.models.split(",")):
            if name in REAL_MODELS:   # as the server runs it
                loaded = load_model(name, LoadOptions(cpu_weights="auto"))
                model, tokenizer = loaded.model, loaded.tokenizer
                cpu_attention.install()
            else:
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
            for workload in filter(None, args.workloads.split(",")):
                for streams in [int(s) for s in args.streams.split(",")]:
                    rows.append(measure(model, tokenizer, name, workload, streams, args, knee))
    if args.server:
        rows.append(measure_servers(args))
    print("| model | workload | streams | tokens | plain tok/s | speculative tok/s | "
          "ratio: median | min | max | decode-only median | tokens / step | acceptance | "
          "same tokens |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0 if all(r[-1] != "NO" for r in rows) else 1


def measure(model, tokenizer, name: str, workload: str, streams: int, args, knee: float
            ) -> list[str]:
    """One row: --repeat interleaved pairs of runs, plain then speculative."""
    temperature = 1.0 if workload == "sampled" else 0.0
    count = max(8, streams * args.requests)
    builders = REAL_PROMPTS if name in REAL_MODELS else PROMPTS
    prompts = [builders[workload](tokenizer, seed) for seed in range(count)]
    decode_both(model, tokenizer, prompts[:1], 1, 8, knee)   # warm up
    ratios, decode_ratios, rates, same = [], [], [], True
    counts: dict[str, int] = {}
    reference = None
    for repeat in range(args.repeat):
        slow_way, fast_way = decode_both(model, tokenizer, prompts, streams, args.max_tokens,
                                         knee, temperature, args.control)
        plain, fast, run_counts = slow_way.outputs, fast_way.outputs, fast_way.counts()
        n_plain, n_fast = (sum(len(t) for t in out) for out in (plain, fast))
        rates.append((n_plain / slow_way.seconds, n_fast / fast_way.seconds))
        ratios.append(rates[-1][1] / rates[-1][0])
        decode_ratios.append((n_fast / fast_way.decode) / (n_plain / slow_way.decode))
        for key, value in run_counts.items():
            counts[key] = counts.get(key, 0) + value
        if not temperature:
            reference = plain if reference is None else reference
            same = same and plain == fast == reference
        log(f"{name} {workload} C={streams} run {repeat + 1}: {n_plain}/{n_fast} tokens, "
            f"plain {rates[-1][0]:.0f}/s, speculative {rates[-1][1]:.0f}/s "
            f"({ratios[-1]:.2f}x; decode steps only {decode_ratios[-1]:.2f}x); {run_counts}")
    tokens = sum(len(t) for t in plain)
    per_step = counts.get("tokens", 0) / max(1, counts.get("sequence_steps", 0))
    acceptance = counts.get("accepted", 0) / max(1, counts.get("drafted", 0))
    return [name, workload, str(streams), str(tokens),
            f"{statistics.median(r[0] for r in rates):.0f}",
            f"{statistics.median(r[1] for r in rates):.0f}",
            f"{statistics.median(ratios):.2f}x", f"{min(ratios):.2f}x", f"{max(ratios):.2f}x",
            f"{statistics.median(decode_ratios):.2f}x", f"{per_step:.2f}", f"{acceptance:.0%}",
            "—" if temperature else "yes" if same else "NO"]


def measure_servers(args) -> list[str]:
    """The copy task as a user tries it: streamed requests to a server with `--speculative
    off` and to one with the default, alternated (a run of all prompts on each per repeat)."""
    import httpx
    from openai import OpenAI

    import throughput
    from triode.model.loading import BUNDLED_PATH

    rng = random.Random(31)
    real = args.server_model in REAL_MODELS
    if real:
        prompts = ["Repeat the following paragraph exactly, word for word:\n\n" + paragraph(i)
                   for i in range(max(6, args.requests))]
    else:
        prompts = ["Reply with: " + " ".join(rng.choice(WORDS)
                                             for _ in range(rng.randint(60, 90)))
                   for _ in range(max(6, args.requests))]
    model = args.server_model if real else BUNDLED_PATH

    def run(url: str) -> tuple[float, int, list[str]]:
        client = OpenAI(base_url=url + "/v1", api_key="unused")
        tokens, seconds, texts = 0, 0.0, []
        for prompt in prompts:
            first = last = None
            done = None
            for event in client.responses.create(model=throughput.ALIAS, input=prompt,
                                                 max_output_tokens=args.max_tokens,
                                                 temperature=0, stream=True):
                if event.type.endswith(".delta"):
                    last = time.perf_counter()
                    first = first or last
                if event.type in ("response.completed", "response.incomplete"):
                    done = event.response
            texts.append(done.output_text if done is not None else "")
            if first is not None and last is not None and done is not None:
                tokens += done.usage.output_tokens - 1
                seconds += last - first
        return tokens / seconds, tokens, texts

    ratios, rates, same = [], [], True
    with tempfile.TemporaryDirectory() as scratch:
        throughput.TRIODE_ENV.clear()
        throughput.TRIODE_ENV["TRIODE_SPECULATIVE"] = "off"
        with throughput.triode_server(model, 1, Path(scratch) / "off.log") as off:
            throughput.TRIODE_ENV["TRIODE_SPECULATIVE"] = "ngram"
            with throughput.triode_server(model, 1, Path(scratch) / "on.log") as on:
                run(off), run(on)   # warm up
                for repeat in range(args.repeat):
                    (plain, tokens, slow), (fast, _, quick) = run(off), run(on)
                    rates.append((plain, fast))
                    ratios.append(fast / plain)
                    same = same and slow == quick
                    log(f"server copy run {repeat + 1}: plain {plain:.0f}/s, speculative "
                        f"{fast:.0f}/s ({ratios[-1]:.2f}x), same text: {slow == quick}")
                health = httpx.get(on + "/health").json()["speculation"]
    return [args.server_model, "copy, through the server", "1", str(tokens),
            f"{statistics.median(r[0] for r in rates):.0f}",
            f"{statistics.median(r[1] for r in rates):.0f}",
            f"{statistics.median(ratios):.2f}x", f"{min(ratios):.2f}x", f"{max(ratios):.2f}x",
            "", f"{health['tokens_per_step']:.2f}", f"{health['acceptance_rate']:.0%}",
            "yes" if same else "NO"]


if __name__ == "__main__":
    sys.exit(main())
