"""Measures the bundled model at temperature 0 on held-out prompts.

    PYTHONPATH=src python -m training.tiny.evaluate [--model DIR] [--n 200]   # from the repo root

Two held-out sets: (a) in-distribution, combinations never seen in training (prompts that
occur in the training stream are skipped); (b) unseen words, keys and tool names the generator
never uses. Each family is scored single-turn and as the third user turn of a conversation.
With --write-readme, writes EVAL.md (the table) and eval.json next to the model (default: the
bundled one, src/triode/model/tiny).
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
import sys
from pathlib import Path

from .data import (Tasks, agent_example, agent_stage_example, conversation, expected_completion,
                   finetune_example, prompt_messages, recall_conversation, tools_example)

STAGES = {"base": conversation, "finetune": finetune_example, "tools": tools_example,
          "agent": agent_stage_example}

# The runtime model directory, which also receives EVAL.md and eval.json.
MODEL_DIR = Path(__file__).resolve().parents[2] / "src" / "triode" / "model" / "tiny"
TOOL_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)
THINK = re.compile(r"^<think>\n([^\n]+)\n</think>\n\n(.*)$", re.S)


def expected_text(msg: dict) -> str:
    return msg.get("content") or ""


def score(family: str, expected: dict, output: str) -> bool:
    if family == "tool":
        calls = []
        for body in TOOL_CALL.findall(output):
            try:
                obj = json.loads(body)
            except json.JSONDecodeError:
                return False
            calls.append((obj.get("name"), obj.get("arguments")))
        rest = TOOL_CALL.sub("", output).strip()
        want = [(c["function"]["name"], c["function"]["arguments"]) for c in expected["tool_calls"]]
        return calls == want and rest == ""
    if family == "think":
        m = THINK.match(output)
        return bool(m) and m.group(2) == expected["content"]
    if family == "json":
        try:
            return json.loads(output) == json.loads(expected["content"])
        except json.JSONDecodeError:
            return False
    return output == expected_text(expected)


def with_tools_share(make, share: float):
    """`make` with data.TOOLS_STAGE_SHARE (train.py's --tools-share) set while it runs."""
    from . import data

    def made(rng):
        saved, data.TOOLS_STAGE_SHARE = data.TOOLS_STAGE_SHARE, share
        try:
            return make(rng)
        finally:
            data.TOOLS_STAGE_SHARE = saved

    return made


def parse_stage(spec: str) -> tuple[object, int, int]:
    """NAME:EXAMPLES:SEED[:AGENT_SHARE[:TOOLS_SHARE]] -> (example generator, examples, seed)."""
    name, examples, seed, *shares = spec.split(":")
    make = functools.partial(agent_stage_example, share=float(shares[0])) if shares \
        else STAGES[name]
    if len(shares) > 1:
        make = with_tools_share(make, float(shares[1]))
    return make, int(examples), int(seed)


def training_prompts(stages: list[tuple[object, int, int]]) -> set[str]:
    """Every user message the training stages (generator, examples, seed) produced."""
    seen = set()
    for make, examples, seed in stages:
        rng = random.Random(seed)
        for _ in range(examples):
            for m in make(rng)["messages"]:
                if m["role"] == "user":
                    seen.add(m["content"])
    return seen


def heldout(n: int, *, unseen: bool, family: str, turns: int, seed: int, exclude: set[str],
            agent: bool = False):
    """Held-out examples; in-distribution ones whose user turns were all seen are skipped."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        if agent:
            ex = agent_example(rng, unseen=unseen, family=family, filler_words=AGENT_FILLER)
        elif family == "recall":
            ex = recall_conversation(rng, unseen=unseen, prior_turns=turns - 1)
        else:
            ex = conversation(rng, unseen=unseen, family=family, prior_turns=turns - 1)
        users = [m["content"] for m in ex["messages"] if m["role"] == "user"]
        if not unseen and all(u in exclude for u in users):
            continue
        out.append(ex)
    return out


# The stages that made the bundled weights (training/README.md has the commands).
BUNDLED_STAGES = ["base:120000:0", "finetune:30000:1", "tools:20000:2", "tools:20000:3"]

CELLS = [(family, turns) for family in Tasks.FAMILIES for turns in (1, 3)] + [("recall", 3)]
# Agent-shaped prompts (long instructions, tools, context messages, wrapped tool output; see
# data.agent_example) with more filler than training ever used (training kept examples under
# 3,072 tokens): 3.5k to 10k tokens, so these cells measure the sliding window's reach too.
AGENT_FAMILIES = ("reply", "tool", "tool_result", "think", "json", "recall")
AGENT_FILLER = (700, 2000)
AGENT_SHARE = 4    # an agent cell has n // AGENT_SHARE prompts (they are 10x longer)


def run(model_dir: str, n: int, stages, *, agent: bool = True) -> dict:
    from mlx_lm import load

    # The bundled model's architecture file (sliding_qwen3.py) is ours: trusted.
    model, tokenizer = load(model_dir, trust_remote_code=True)
    exclude = training_prompts(stages)
    results: dict = {}
    for set_name, unseen in (("a", False), ("b", True)):
        for family, turns in CELLS:
            seed = 1000 + 100 * [c[0] for c in CELLS].index(family) + 10 * turns + int(unseen)
            exs = heldout(n, unseen=unseen, family=family, turns=turns, seed=seed, exclude=exclude)
            results[f"{set_name}/{family}/{turns}"] = measure(model, tokenizer, family, exs)
            print(f"{set_name} {family:12s} turns={turns} {results[f'{set_name}/{family}/{turns}']['accuracy']:.3f}", flush=True)
        for family in AGENT_FAMILIES if agent else ():
            seed = 5000 + 100 * AGENT_FAMILIES.index(family) + int(unseen)
            exs = heldout(max(1, n // AGENT_SHARE), unseen=unseen, family=family, turns=0,
                          seed=seed, exclude=exclude, agent=True)
            cell = measure(model, tokenizer, family, exs)
            results[f"{set_name}/{family}/agent"] = cell
            print(f"{set_name} {family:12s} agent {cell['accuracy']:.3f} "
                  f"({cell['min_tokens']}-{cell['max_tokens']} tokens)", flush=True)
    return results


KV_BITS = 0   # --kv-bits: measure with triode's batched quantized KV cache


def measure(model, tokenizer, family: str, exs: list[dict]) -> dict:
    from mlx_lm.generate import batch_generate

    prompts = []
    for ex in exs:
        text = tokenizer.apply_chat_template(
            prompt_messages(ex), tools=ex["tools"] or None,
            add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    caches = None
    if KV_BITS:
        from triode.model.kvquant import quantized_cache

        caches = [quantized_cache(model, KV_BITS) for _ in prompts]
    resp = batch_generate(model, tokenizer, prompts, max_tokens=128, prompt_caches=caches)
    ok = 0
    failures = []
    for ex, text in zip(exs, resp.texts):
        good = score(family, expected_completion(ex), text)
        ok += good
        if not good and len(failures) < 3:
            failures.append({"prompt": prompt_messages(ex)[-1]["content"], "output": text})
    return {"accuracy": ok / len(exs), "n": len(exs), "failures": failures,
            "min_tokens": min(map(len, prompts)), "max_tokens": max(map(len, prompts))}


def table(results: dict) -> str:
    rows = ["| task family | (a) single-turn | (a) third turn | (b) single-turn | (b) third turn |",
            "|---|---|---|---|---|"]
    for family in (*Tasks.FAMILIES, *Tasks.HISTORY_FAMILIES):
        cells = [f"{100 * results[f'{s}/{family}/{t}']['accuracy']:.1f}%"
                 if f"{s}/{family}/{t}" in results else "—"
                 for s in ("a", "b") for t in (1, 3)]
        rows.append(f"| {family} | " + " | ".join(cells) + " |")
    n = next(iter(results.values()))["n"]
    rows.append(f"\n{n} held-out prompts per cell, greedy decoding.")
    agent = [k for k in results if k.endswith("/agent")]
    if agent:
        lo = min(results[k]["min_tokens"] for k in agent)
        hi = max(results[k]["max_tokens"] for k in agent)
        rows += ["", f"Agent-shaped prompts, {lo:,} to {hi:,} tokens (training stopped at 3,072):",
                 "", "| task family | (a) in-distribution | (b) unseen words |", "|---|---|---|"]
        for family in AGENT_FAMILIES:
            cells = [f"{100 * results[f'{s}/{family}/agent']['accuracy']:.1f}%" for s in "ab"]
            rows.append(f"| {family} | " + " | ".join(cells) + " |")
        rows.append(f"\n{results[agent[0]]['n']} held-out prompts per cell.")
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default=str(MODEL_DIR))
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--stage", action="append", default=[],
                   help="NAME:EXAMPLES:SEED[:AGENT_SHARE[:TOOLS_SHARE]] of a training stage "
                        "whose prompts are excluded from the in-distribution set; repeatable "
                        "(default: the bundled model's)")
    p.add_argument("--write-readme", action="store_true", help="write EVAL.md and eval.json")
    p.add_argument("--blas", default="auto")
    p.add_argument("--skip-agent", action="store_true", help="only the short-prompt cells")
    p.add_argument("--kv-bits", type=int, default=0, choices=(0, 4, 8),
                   help="quantize the KV cache as `triode serve --kv-bits` does")
    args = p.parse_args(argv)
    if args.write_readme and args.kv_bits:
        p.error("--write-readme records the model as it ships: not with --kv-bits")
    global KV_BITS
    KV_BITS = args.kv_bits
    from triode.model.blas import preload_blas

    preload_blas(args.blas)
    specs = args.stage or BUNDLED_STAGES
    stages = [parse_stage(spec) for spec in specs]
    results = run(args.model, args.n, stages, agent=not args.skip_agent)
    md = table(results)
    print(md)
    if args.write_readme:
        out = Path(args.model)
        (out / "EVAL.md").write_text(md)
        (out / "eval.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
