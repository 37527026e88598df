"""Builds the bundled tiny chat model: tokenizer, synthetic data, MLX training, evaluation.

    PYTHONPATH=src python -m training.tiny.train --out src/triode/model/tiny  # one process
    PYTHONPATH=src python -m training.tiny.train --ranks 2 --out ...          # two ranks (ring)

Run from the repository root. The bundled weights are made in stages (the exact commands are in
training/README.md and the model card, src/triode/model/tiny/README.md): `base` from scratch,
then `finetune` and `tools` from the previous weights.

Not run by CI or tests; the files it writes are committed. Fixed seeds and a fixed step count
make a run reproducible. With `--ranks 2` the script starts its own two ranks over loopback
(MLX's ring backend), each training on half of every batch.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The runtime model directory: the default output (weights, config, tokenizer, eval record).
MODEL_DIR = REPO / "src" / "triode" / "model" / "tiny"

CONFIG = {
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 192,
    "num_hidden_layers": 4,
    "intermediate_size": 576,
    "num_attention_heads": 3,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}

# The agent stage (and the bundled model since) attends to a sliding window in every layer
# (src/triode/model/tiny/sliding_qwen3.py, named by config.json), so a prompt has no length limit
# but the context length the server allows.
SLIDING = {
    "model_file": "sliding_qwen3.py",
    "sliding_window": 1024,
    "max_position_embeddings": 32768,
}

ASSISTANT_SPAN = re.compile(r"<\|im_start\|>assistant\n(.*?<\|im_end\|>)", re.S)


def log(*a):
    if int(os.environ.get("MLX_RANK", "0")) == 0:
        print(*a, flush=True)


def encode(tokenizer, example: dict) -> tuple[list[int], list[bool]]:
    """Token ids of a whole conversation and, per token, whether it is assistant output."""
    text = tokenizer.apply_chat_template(
        example["messages"], tools=example["tools"] or None, tokenize=False
    )
    enc = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    spans = [m.span(1) for m in ASSISTANT_SPAN.finditer(text)]
    mask = []
    for start, _ in enc.offsets:
        mask.append(any(a <= start < b for a, b in spans))
    return enc.ids, mask


def make_batches(rows, tokens_per_batch: int, rng: random.Random):
    rows = sorted(rows, key=lambda r: len(r[0]))
    batches, cur, cur_max = [], [], 0
    for r in rows:
        n = len(r[0])
        if cur and max(cur_max, n) * (len(cur) + 1) > tokens_per_batch:
            batches.append(cur)
            cur, cur_max = [], 0
        cur.append(r)
        cur_max = max(cur_max, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def to_arrays(batch, pad_id: int):
    import mlx.core as mx
    import numpy as np

    width = max(len(ids) for ids, _ in batch)
    x = np.full((len(batch), width), pad_id, dtype=np.int32)
    m = np.zeros((len(batch), width), dtype=bool)
    for i, (ids, mask) in enumerate(batch):
        x[i, : len(ids)] = ids
        m[i, : len(mask)] = mask
    inputs, labels, lmask = x[:, :-1], x[:, 1:], m[:, 1:]
    sel = np.nonzero(lmask.reshape(-1))[0].astype(np.int32)
    return mx.array(inputs), mx.array(labels.reshape(-1)[sel]), mx.array(sel), int(sel.size)


def train(args) -> None:
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from mlx.utils import tree_flatten
    from transformers import AutoTokenizer

    from .data import agent_stage_example, conversation, finetune_example, tools_example
    from .tokenizer import build, corpus_sample

    group = mx.distributed.init() if args.ranks > 1 else None
    rank = group.rank() if group else 0
    size = group.size() if group else 1
    out = Path(args.out)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    if rank == 0 and not (out / "tokenizer.json").exists():
        build(corpus_sample(20000, seed=1), out)
        log("tokenizer built")
    if group:
        mx.eval(mx.distributed.all_sum(mx.array(1.0)))  # barrier: rank 0 wrote the tokenizer
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    pad_id = tokenizer.pad_token_id

    from . import data

    data.AGENT_STAGE_SHARE = args.agent_share
    data.TOOLS_STAGE_SHARE = args.tools_share
    rng = random.Random(args.seed)
    make_example = {"base": conversation, "finetune": finetune_example,
                    "tools": tools_example, "agent": agent_stage_example}[args.stage]
    t0 = time.time()
    rows = []
    for i in range(args.examples):
        ex = make_example(rng)
        ids, mask = encode(tokenizer, ex)
        if len(ids) <= args.max_len:
            rows.append((ids, mask))
    n_tokens = sum(len(r[0]) for r in rows)
    log(f"{len(rows)} examples, {n_tokens} tokens, built in {time.time() - t0:.0f}s")

    config = dict(CONFIG, vocab_size=len(tokenizer))
    if args.stage == "agent":
        from triode.model.tiny.sliding_qwen3 import Model, ModelArgs
        config.update(SLIDING)
    else:
        from mlx_lm.models.qwen3 import Model, ModelArgs
    mx.random.seed(args.seed)
    model = Model(ModelArgs.from_dict(config))
    if args.init_from:
        model.load_weights(str(Path(args.init_from) / "model.safetensors"))
        log(f"initialised from {args.init_from}")
    n_params = sum(v.size for _, v in tree_flatten(model.parameters()))
    log(f"parameters: {n_params}")

    batches = make_batches(rows, args.tokens_per_batch, random.Random(args.seed + 1))
    steps = args.steps
    warmup = min(100, steps // 10)
    schedule = optim.join_schedules(
        [optim.linear_schedule(1e-5, args.lr, warmup),
         optim.cosine_decay(args.lr, steps - warmup, args.lr * 0.05)],
        [warmup],
    )
    opt = optim.AdamW(learning_rate=schedule, weight_decay=0.01)

    def loss_fn(model, inputs, labels, sel):
        h = model.model(inputs)
        h = h.reshape(-1, h.shape[-1])[sel]
        logits = model.model.embed_tokens.as_linear(h)
        return nn.losses.cross_entropy(logits, labels, reduction="mean")

    grad_fn = nn.value_and_grad(model, loss_fn)
    t0 = time.time()
    seen = 0
    for step in range(steps):
        batch = batches[(step * size + rank) % len(batches)]
        inputs, labels, sel, _ = to_arrays(batch, pad_id)
        loss, grads = grad_fn(model, inputs, labels, sel)
        if group:
            grads = nn.utils.average_gradients(grads, group=group)
            loss = mx.distributed.all_sum(loss, group=group) / size
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        opt.update(model, grads)
        mx.eval(model.parameters(), opt.state, loss)
        seen += inputs.size * size
        if step % 50 == 0 or step == steps - 1:
            el = time.time() - t0
            log(f"step {step} loss {loss.item():.4f} lr {schedule(step).item():.2e} "
                f"tok/s {seen / max(el, 1e-9):.0f} elapsed {el:.0f}s")
    wall = time.time() - t0
    if rank == 0:
        weights = dict(tree_flatten(model.parameters()))
        mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if "model_file" in config and out.resolve() != MODEL_DIR.resolve():
            shutil.copy(MODEL_DIR / config["model_file"], out / config["model_file"])
        # The model is a deterministic test fixture: greedy unless a request asks otherwise.
        (out / "generation_config.json").write_text(json.dumps({"do_sample": False}) + "\n")
        meta = {"stage": args.stage, "init_from": args.init_from, "steps": steps, "train_seconds": round(wall), "parameters": n_params,
                "examples": len(rows), "tokens_seen": seen, "seed": args.seed,
                "ranks": size, "tokens_per_batch": args.tokens_per_batch, "lr": args.lr,
                "agent_share": args.agent_share, "tools_share": args.tools_share,
                "max_len": args.max_len}
        (work / f"train_meta_{args.stage}.json").write_text(json.dumps(meta, indent=2) + "\n")
        log(f"saved to {out} after {wall:.0f}s")


def launch_ranks(args) -> int:
    """Starts `args.ranks` copies of this script as ring-backend ranks over loopback."""
    base = 40000 + random.Random().randint(0, 9000)
    hosts = [[f"127.0.0.1:{base + i}"] for i in range(args.ranks)]
    hostfile = Path(tempfile.mkstemp(suffix=".json")[1])
    hostfile.write_text(json.dumps(hosts))
    argv = [sys.executable, "-m", "training.tiny.train", *sys.argv[1:], "--as-rank"]
    # The ranks find `training` (and `triode`, from src/) wherever they were started from.
    pythonpath = os.pathsep.join(
        p for p in (str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    procs = []
    for rank in range(args.ranks):
        threads = str(max(1, (os.cpu_count() or 1) // args.ranks))
        env = dict(os.environ, PYTHONPATH=pythonpath, MLX_HOSTFILE=str(hostfile),
                   MLX_RANK=str(rank), MKL_NUM_THREADS=threads, OMP_NUM_THREADS=threads)
        procs.append(subprocess.Popen(argv, env=env))
    try:
        codes = [p.wait() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return max(codes)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default=str(MODEL_DIR))
    p.add_argument("--work", default="build/tiny")
    p.add_argument("--examples", type=int, default=120000)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--tokens-per-batch", type=int, default=6144)
    p.add_argument("--max-len", type=int, default=900)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stage", choices=("base", "finetune", "tools", "agent"), default="base",
                   help="base: the core families; finetune: plus long copies and recall; "
                        "tools: mostly tool calls with open-ended names and keys; agent: "
                        "sliding-window attention, long agent-shaped prompts, wrapped tool output")
    p.add_argument("--init-from", default=None, help="start from this model directory's weights")
    p.add_argument("--agent-share", type=float, default=0.6,
                   help="agent stage: the share of agent-shaped examples (the rest: the tools "
                        "stage's mix)")
    p.add_argument("--tools-share", type=float, default=0.6,
                   help="tools and agent stages: the share of tool-call conversations in the "
                        "tools stage's mix (the rest: the fine-tune stage's mix, with recall "
                        "and long copies)")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--blas", default="auto", help="auto|mkl|none: BLAS preloaded before MLX")
    p.add_argument("--skip-eval", action="store_true")
    p.add_argument("--as-rank", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from triode.model.blas import preload_blas

    preload_blas(args.blas)
    if args.ranks > 1 and not args.as_rank:
        code = launch_ranks(args)
        if code:
            return code
    else:
        train(args)
        if args.as_rank:
            return 0
    if not args.skip_eval:
        from .evaluate import main as evaluate

        return evaluate(["--model", args.out, "--write-readme",
                         "--stage", f"{args.stage}:{args.examples}:{args.seed}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
