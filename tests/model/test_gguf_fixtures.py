"""The GGUF fixture pairs' own invariants (tests/fixtures/gguf_files.py), without triode's GGUF
loader: the directory is an mlx-lm model, the GGUF reads, its tensors are named as llama.cpp
names them, its weights decode to the directory's once the converter's transforms are undone,
and its vocabulary puts every added token at the Hugging Face tokenizer's id."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import gguf
import numpy as np
import pytest

from ..fixtures.gguf_files import ARCHS, WEIGHT_TYPES, Pair, build_pair

# general.architecture: Mistral is a llama to llama.cpp.
GGUF_ARCH = {"llama": "llama", "llama3": "llama", "mistral": "llama", "qwen2": "qwen2",
             "qwen3": "qwen3", "gemma3": "gemma3", "phi3": "phi3"}

# llama.cpp's tensor names (src/models/*.cpp) per block, and outside the blocks.
BLOCK = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
         "ffn_up", "ffn_down")
BLOCK_TENSORS = {
    "llama": [f"{n}.weight" for n in BLOCK],
    "llama3": [f"{n}.weight" for n in BLOCK],
    "mistral": [f"{n}.weight" for n in BLOCK],
    "qwen2": [f"{n}.weight" for n in BLOCK] + ["attn_q.bias", "attn_k.bias", "attn_v.bias"],
    "qwen3": [f"{n}.weight" for n in (*BLOCK, "attn_q_norm", "attn_k_norm")],
    "gemma3": [f"{n}.weight" for n in (*BLOCK, "attn_q_norm", "attn_k_norm",
                                       "post_attention_norm", "post_ffw_norm")],
    # Phi-3's fused projections: q, k, v in one; gate and up in ffn_up.
    "phi3": [f"{n}.weight" for n in ("attn_norm", "attn_qkv", "attn_output", "ffn_norm",
                                     "ffn_up", "ffn_down")],
}
OUTSIDE = {"token_embd.weight", "output_norm.weight"}
PERMUTED = ("llama", "llama3", "mistral")   # the converter's LlamaModel: q/k rows permuted

# Every arch in a float, a block-quantized and a K-quant (wide) type; every type on the two
# archs whose weights the converter transforms (llama's q/k permutation, Gemma's norms).
CASES = sorted({(a, w) for a in ARCHS for w in ("f32", "q4_0", "q4_k")}
               | {(a, w) for a in ("llama", "gemma3") for w in WEIGHT_TYPES})


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Pair]:
    """Builds each (arch, weight type) once for the module."""
    root = tmp_path_factory.mktemp("gguf")
    built: dict[tuple[str, str], Pair] = {}

    def get(arch: str, weight_type: str) -> Pair:
        if (arch, weight_type) not in built:
            built[arch, weight_type] = build_pair(arch, root, weight_type)
        return built[arch, weight_type]
    return get


def rope_rows(n_rows: int, heads: int) -> np.ndarray:
    """For each row of a GGUF llama q/k matrix, the Hugging Face row it holds: GGML's RoPE
    rotates adjacent pairs (2i, 2i+1) of a head where HF's rotates (i, i + d/2)."""
    d = n_rows // heads
    head, r = np.divmod(np.arange(n_rows), d)
    return head * d + (r % 2) * (d // 2) + r // 2


def expected_names(arch: str, config: dict[str, Any]) -> set[str]:
    names = set(OUTSIDE)
    if not config["tie_word_embeddings"]:
        names.add("output.weight")
    if arch == "llama3":
        names.add("rope_freqs.weight")
    return names | {f"blk.{i}.{n}" for i in range(config["num_hidden_layers"])
                    for n in BLOCK_TENSORS[arch]}


@pytest.mark.parametrize(("arch", "weight_type"), CASES)
def test_pair(pair: Callable[[str, str], Pair], arch: str, weight_type: str) -> None:
    """mlx-lm loads the directory and runs it; the GGUF has the converter's names and
    types, and every tensor decodes to the directory's (llama's q/k rows in GGML's RoPE
    order, Gemma's norms 1 above the directory's)."""
    import mlx.core as mx
    import mlx_lm

    p = pair(arch, weight_type)
    config = json.loads((p.directory / "config.json").read_text())
    model = mlx_lm.load(str(p.directory))[0]
    logits = model(mx.array([[1, 2, 3]]))
    assert logits.shape == (1, 3, config["vocab_size"])

    reader = gguf.GGUFReader(p.gguf)
    assert reader.fields["general.architecture"].contents() == GGUF_ARCH[arch]
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == len(reader.tensors)
    assert set(tensors) == expected_names(arch, config)

    hf = dict(mx.load(str(p.directory / "model.safetensors")))
    assert len(hf) + (arch == "llama3") == len(tensors)   # rope_freqs is made, not converted
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == GGUF_ARCH[arch])
    names = gguf.get_tensor_name_map(arch_id, config["num_hidden_layers"])
    matrix_type = gguf.GGMLQuantizationType[weight_type.upper()]
    for hf_name, value in hf.items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf_name
        t = tensors[name]
        expected = np.array(value)
        assert tuple(reversed([int(n) for n in t.shape])) == expected.shape
        stored = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(expected.shape)
        if expected.ndim == 1:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
        else:
            assert t.tensor_type == matrix_type, t.name
        if arch in PERMUTED and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = config["num_attention_heads" if "q_proj" in hf_name else "num_key_value_heads"]
            expected = expected[rope_rows(len(expected), heads)]
        if arch == "gemma3" and hf_name.endswith("norm.weight"):
            expected = expected + np.float32(1.0)
        assert np.array_equal(stored, expected), t.name


def test_llama3_rope_factors(pair: Callable[[str, str], Pair]) -> None:
    """Llama 3's rope_scaling becomes per-frequency factors: 1 for the high frequencies,
    `factor` (8) for the low ones, rising in between."""
    reader = gguf.GGUFReader(pair("llama3", "f32").gguf)
    factors = next(np.asarray(t.data) for t in reader.tensors if t.name == "rope_freqs.weight")
    assert factors[0] == 1.0 and factors[-1] == 8.0
    assert np.all(np.diff(factors) >= 0) and len(set(factors.tolist())) > 2


@pytest.mark.parametrize("arch", ARCHS)
def test_vocabulary(pair: Callable[[str, str], Pair], arch: str) -> None:
    """Every added token of tokenizer.json sits at its id in the GGUF's token list, as a
    control token when special and a user-defined one otherwise; BOS/EOS ids agree with the
    Hugging Face tokenizer's."""
    from transformers import AutoTokenizer

    p = pair(arch, "f32")
    reader = gguf.GGUFReader(p.gguf)
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [field.contents(i) for i in range(len(field.data))]
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    added = json.loads((p.directory / "tokenizer.json").read_text())["added_tokens"]
    assert added
    for t in added:
        assert tokens[t["id"]] == t["content"]
        assert types[t["id"]] == (gguf.TokenType.CONTROL if t["special"]
                                  else gguf.TokenType.USER_DEFINED), t["content"]
    tokenizer = AutoTokenizer.from_pretrained(p.directory)
    assert reader.fields["tokenizer.ggml.eos_token_id"].contents() == tokenizer.eos_token_id
    if tokenizer.bos_token_id is not None:
        assert reader.fields["tokenizer.ggml.bos_token_id"].contents() == tokenizer.bos_token_id
    for t in added:
        assert tokenizer.convert_tokens_to_ids(t["content"]) == t["id"]


@pytest.mark.parametrize("weight_type", ["f32", "q4_k"])
def test_deterministic(tmp_path: Path, weight_type: str) -> None:
    """The same arguments write the same bytes."""
    def digest(root: Path) -> list[str]:
        p = build_pair("gemma3", root, weight_type)
        files = [*sorted(p.directory.iterdir()), p.gguf]
        return [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
