#!/usr/bin/env python
"""What constrained decoding (src/triode/model/constraints.py, llguidance) costs.

Prints, for a realistic json_schema (nested object, enum, bounded integer, array, pattern):

    request side    compile_text_format, first call and cached
    engine side     llguidance tokenizer (once per model), matcher (once per grammar and
                    tokenizer), per-request copy
    per token       the matcher's mask alone, and the whole logits processor (feed the last
                    token, mask, `mx.where` on [1, vocab] logits, evaluated), stepping along
                    the tokens of a valid document
    decode          one sequence through mlx-lm's BatchGenerator, with and without the
                    processor, in ms per generated token

    .venv/bin/python bench/constraints.py                       # the bundled model
    .venv/bin/python bench/constraints.py --model /tmp/tinytest

Numbers are medians; the machine is shared, so read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from triode.model.blas import preload_blas

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 5},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"},
                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "tags", "address"],
    "additionalProperties": False,
}
DOCUMENT = {"name": "Ada Lovelace", "age": 36, "role": "admin", "tags": ["math", "poetry"],
            "address": {"city": "London", "zip": "12345"}}
FORMAT = {"type": "json_schema", "name": "person", "schema": SCHEMA, "strict": True}


def timed(fn, repeat: int) -> float:
    """Median seconds of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs"


def decode_ms_per_token(model, tokenizer, prompt, processors, max_tokens: int) -> tuple[float, int]:
    from mlx_lm.generate import BatchGenerator

    generator = BatchGenerator(model, stop_tokens=[[t] for t in tokenizer.eos_token_ids])
    generator.insert([prompt], [max_tokens], logits_processors=[processors])
    count, start = 0, None
    while responses := generator.next_generated():
        if start is None:  # the first token includes the prefill
            start = time.perf_counter()
            continue
        count += len(responses)
    elapsed = time.perf_counter() - start
    generator.close()
    return elapsed / max(count, 1) * 1e3, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model path (default: the bundled model)")
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()

    preload_blas("auto")
    import mlx.core as mx
    from mlx_lm import load

    from triode.model import constraints
    from triode.model.loading import BUNDLED_PATH

    if args.model is None and not (BUNDLED_PATH / "config.json").exists():
        raise SystemExit(f"no trained weights in {BUNDLED_PATH} yet: pass --model PATH")
    model, tokenizer = load(args.model or str(BUNDLED_PATH), trust_remote_code=True)
    vocab = model.args.vocab_size
    print(f"model {args.model or 'bundled'}: vocab {vocab}")

    start = time.perf_counter()
    constraints.compile_text_format(FORMAT)
    first = time.perf_counter() - start
    cached = timed(lambda: constraints.compile_text_format(FORMAT), 200)
    print(f"compile_text_format: first {us(first)}, cached {us(cached)}")

    start = time.perf_counter()
    constraints.ll_tokenizer(tokenizer)
    print(f"llguidance tokenizer: {(time.perf_counter() - start) * 1e3:.1f} ms (once per model)")
    grammar = constraints.compile_text_format(FORMAT)
    start = time.perf_counter()
    constraints.make_processor(grammar, tokenizer)
    print(f"first processor for a grammar: {(time.perf_counter() - start) * 1e3:.2f} ms "
          "(builds the matcher)")
    again = timed(lambda: constraints.make_processor(grammar, tokenizer), 200)
    print(f"each further processor: {us(again)} (copies it)")

    ids = tokenizer.encode(json.dumps(DOCUMENT), add_special_tokens=False)
    ll = constraints.ll_tokenizer(tokenizer)
    mask_times = []
    matcher = constraints._template_matcher(grammar, ll).deep_copy()
    bitmask = np.zeros((ll.vocab_size + 31) // 32, dtype=np.int32)
    for token in ids:
        start = time.perf_counter()
        matcher.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)
        mask_times.append(time.perf_counter() - start)
        assert matcher.consume_token(token), matcher.get_error()
    assert matcher.is_accepting()

    prompt_ids = list(range(8))
    logits = mx.random.normal((1, vocab))
    mx.eval(logits)
    processor = constraints.make_processor(grammar, tokenizer)
    step_times = []
    for n in range(len(ids) + 1):
        context = mx.array(prompt_ids + ids[:n])
        mx.eval(context)
        start = time.perf_counter()
        mx.eval(processor(context, logits))
        step_times.append(time.perf_counter() - start)
    assert processor.finished and processor.error is None
    print(f"per token, {len(ids)} tokens of a valid document: mask only "
          f"{us(statistics.median(mask_times))} (max {us(max(mask_times))}); whole processor "
          f"{us(statistics.median(step_times))} (max {us(max(step_times))})")

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Describe a person as JSON."}], add_generation_prompt=True)
    free, n_free = decode_ms_per_token(model, tokenizer, prompt, [], args.max_tokens)
    held, n_held = decode_ms_per_token(
        model, tokenizer, prompt, [constraints.make_processor(grammar, tokenizer)], args.max_tokens)
    print(f"decode, one sequence: unconstrained {free:.2f} ms/token ({n_free} tokens), "
          f"constrained {held:.2f} ms/token ({n_held} tokens)")


if __name__ == "__main__":
    main()
