"""Builds the bundled model's byte-level BPE tokenizer and its transformers config files.

Merges only join runs of lowercase letters, or runs of punctuation (with one trailing space):
every digit, capital and whitespace character is a token of its own, and letters never merge
with anything else. A word therefore tokenizes the same wherever it stands (after a space, after a
quote, at the start of a reply), which is what lets a 2M-parameter model copy unseen words.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Iterable

from .template import CHAT_TEMPLATE, MARKER_TOKENS, SPECIAL_TOKENS

PRETOKENIZE_PATTERN = r"[a-z]+|[^\sa-zA-Z0-9]+ ?|\s|."
VOCAB_SIZE = 1024
MAX_LENGTH = 4096


def build(corpus: Iterable[str], out_dir: Path) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKER_TOKENS])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_LENGTH,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def corpus_sample(n: int, seed: int) -> list[str]:
    """Text the BPE merges are learned from: the synthetic chats, rendered as plain text."""
    from .data import conversation

    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        ex = conversation(rng)
        parts = [json.dumps(t) for t in ex["tools"]]
        for m in ex["messages"]:
            parts.append(m.get("reasoning_content", "") + " " + (m.get("content") or ""))
            for tc in m.get("tool_calls", []):
                parts.append(json.dumps(tc["function"]))
        texts.append("\n".join(parts))
    return texts
