"""Serving a GGUF file (llama.cpp's format) on mlx-lm's own model classes.

A GGUF holds the weights, the model's hyper-parameters, the tokenizer (vocabulary, merges or
scores, special tokens), the chat template and the context length, all under llama.cpp's
names. Loading one:

- **metadata and tensor types** come from gguf-py's reader (`gguf.GGUFReader`: llama.cpp's own
  Python package; the file is memory-mapped);
- **weights**: when every tensor is of a type MLX reads (F32, F16, BF16, Q4_0, Q4_1, Q8_0),
  through `mx.load`, the quantized ones staying quantized as MLX affine 4- and 8-bit with
  groups of 32 (which is what those GGUF types are). A file holding any other type (the
  K-quants such as the Q4_K_M that Ollama and LM Studio publish most, the IQ types,
  Q5_0/Q5_1) is read by gguf-py instead: its quantized tensors are dequantized and either
  requantized to MLX affine with at least as many bits as the type has
  (`REQUANTIZED_BITS`, groups of 32) or, when the weights are to run in float32 anyway
  (model/precision.py), kept float. docs/models.md#gguf-files has what requantizing costs;
- **names and layout**: GGUF tensor names map onto mlx-lm's (`blk.N.attn_q` ->
  `model.layers.N.self_attn.q_proj`). llama.cpp's converter permutes the rows of a llama
  model's Q and K projections for its interleaved rotary embedding; they are permuted back
  here, so the model runs mlx-lm's default rotary as the checkpoint it came from did. Gemma's
  converter adds 1 to every norm weight; it is taken off here;
- **the tokenizer** is rebuilt by transformers' own GGUF tokenizer mapping (the tokenizer
  classes a Hugging Face repo's tokenizer loads into, given the file's vocabulary and merges or
  scores), with the pre-tokenizers that mapping lacks added from llama.cpp's table
  (`PRE_SPLITS`), and wrapped by mlx-lm as any model directory's tokenizer is.

An architecture is one entry of `ARCHITECTURES`: the mlx-lm module it runs on and how its
hyper-parameters read. Another architecture is a one-line startup error naming it.
"""

from __future__ import annotations

import functools
import json
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

import attrs

from ..errors import SettingsError

GGUF_SUFFIX = ".gguf"

# GGUF types MLX's own reader loads (the quantized ones as MLX affine, groups of 32).
MLX_TYPES = frozenset({"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0"})
FLOAT_TYPES = frozenset({"F32", "F16", "BF16", "F64"})

# Any other quantized type, dequantized by gguf-py: the MLX affine bits it is requantized to
# (at least the type's own bits per weight; groups of 32).
REQUANTIZED_BITS = {
    "Q4_0": 4, "Q4_1": 4, "Q8_0": 8,
    "Q2_K": 4, "Q3_K": 4, "Q4_K": 4, "IQ4_NL": 4, "IQ4_XS": 4, "IQ3_XXS": 4, "IQ3_S": 4,
    "IQ2_XXS": 4, "IQ2_XS": 4, "IQ2_S": 4, "IQ1_S": 4, "IQ1_M": 4, "TQ1_0": 4, "TQ2_0": 4,
    "Q5_0": 5, "Q5_1": 5, "Q5_K": 5, "Q6_K": 6, "Q8_1": 8, "Q8_K": 8,
}
GROUP_SIZE = 32

# Pre-tokenizers (`tokenizer.ggml.pre`) that transformers' mapping leaves at its byte-level
# default, split as llama.cpp splits them (llama-vocab.cpp): each regex splits the pieces the
# one before made, then byte-level BPE applies.
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PRE_SPLITS: dict[str, tuple[str, ...]] = {
    name: (r"\p{N}", GPT2_SPLIT)
    for name in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
                 "minerva-7b")
}

# Control tokens llama.cpp also ends generation on (its end-of-generation set), besides the
# ids the metadata names.
END_OF_TURN_TEXTS = ("<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                     "<|endoftext|>", "<|end_of_text|>", "<EOT>")
CONTROL = 3   # gguf's TokenType.CONTROL

ROPE_FACTORS = "rope_freqs.weight"   # Llama 3.1's scaled rotary: one factor per frequency
PHI3_ROPE_FACTORS = {"long_factor": "rope_factors_long.weight",
                     "short_factor": "rope_factors_short.weight"}


class GgufError(SettingsError):
    """A GGUF file that cannot be served; the message names `--model`."""


@attrs.frozen
class Metadata:
    """A GGUF's key/value metadata; `arch` prefixes the model's own keys."""

    values: dict[str, Any]
    arch: str

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def model(self, key: str, default: Any = None) -> Any:
        """`{arch}.{key}`: the architecture's own hyper-parameter."""
        return self.values.get(f"{self.arch}.{key}", default)

    def require(self, key: str) -> Any:
        value = self.model(key)
        if value is None:
            raise GgufError(f"the GGUF states no {self.arch}.{key}")
        return value


# metadata -> mlx-lm's config.json for the architecture
ConfigReader = Callable[[Metadata], dict[str, Any]]


@attrs.frozen
class Architecture:
    """How one GGUF architecture runs on mlx-lm: its model module and hyper-parameters, the
    GGUF tensor names that differ from the shared table, and what its converter did to the
    weights that is undone here."""

    model_type: str
    config: ConfigReader
    names: dict[str, str] = attrs.field(factory=dict)   # GGUF block tensor -> mlx-lm name
    unpermute_qk: bool = False    # llama.cpp permuted Q/K rows for its interleaved rotary
    norm_offset: float = 0.0      # what the converter added to every norm weight


def _common(meta: Metadata) -> dict[str, Any]:
    """The hyper-parameters the decoder-only architectures state alike."""
    heads = int(meta.require("attention.head_count"))
    hidden = int(meta.require("embedding_length"))
    config: dict[str, Any] = {
        "hidden_size": hidden,
        "num_hidden_layers": int(meta.require("block_count")),
        "intermediate_size": int(meta.require("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.model("attention.head_count_kv", heads)),
        "rms_norm_eps": float(meta.model("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(meta.require("context_length")),
        "head_dim": int(meta.model("attention.key_length", hidden // heads)),
    }
    if meta.model("rope.freq_base") is not None:
        config["rope_theta"] = float(meta.model("rope.freq_base"))
    if meta.model("rope.scaling.type") == "linear":
        config["rope_scaling"] = {"type": "linear", "rope_type": "linear",
                                  "factor": float(meta.model("rope.scaling.factor", 1.0))}
    return config


def _gemma3(meta: Metadata) -> dict[str, Any]:
    config = _common(meta)
    layers, hidden, heads = (config["num_hidden_layers"], config["hidden_size"],
                             config["num_attention_heads"])
    # As llama.cpp runs Gemma 3: local layers' rotary base as stated (10,000 in files that
    # predate the key), five local layers to each global one (the converter does not write
    # the pattern), queries scaled by the head size (27B's, the only one with 62 layers, by
    # hidden / heads).
    config.update(rope_local_base_freq=float(meta.model("rope.freq_base_swa", 10_000.0)),
                  sliding_window_pattern=6,
                  sliding_window=int(meta.model("attention.sliding_window", 4096)),
                  query_pre_attn_scalar=hidden // heads if layers == 62
                  else config["head_dim"])
    return config


def _phi3(meta: Metadata) -> dict[str, Any]:
    config = _common(meta)
    head_dim = config.pop("head_dim")
    rotary = meta.model("rope.dimension_count")
    if rotary is not None:
        config["partial_rotary_factor"] = int(rotary) / head_dim
    original = meta.model("rope.scaling.original_context_length")
    if original is not None:
        config["original_max_position_embeddings"] = int(original)
    return config


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("llama", _common, unpermute_qk=True),
    "qwen2": Architecture("qwen2", _common),
    "qwen3": Architecture("qwen3", _common),
    "gemma3": Architecture("gemma3_text", _gemma3, names={
        "ffn_norm": "pre_feedforward_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm"}, norm_offset=1.0),
    "phi3": Architecture("phi3", _phi3, names={
        "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}),
}

# GGUF names of a block's tensors -> mlx-lm's, shared by the architectures above.
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
             "output": "lm_head"}


def locate(model: str) -> Path | None:
    """The GGUF file `model` names: a `.gguf` file, or a directory holding exactly one (and no
    config.json: that is an mlx-lm model directory); None for anything else."""
    path = Path(model)
    try:
        if path.is_file():
            return path if path.suffix.lower() == GGUF_SUFFIX else None
        if not path.is_dir() or (path / "config.json").exists():
            return None
        found = sorted(p for p in path.iterdir()
                       if p.suffix.lower() == GGUF_SUFFIX and p.is_file())
    except OSError:
        return None
    if len(found) > 1:
        raise GgufError(f"--model: {model}: {len(found)} GGUF files in it "
                        f"({', '.join(p.name for p in found[:4])}); name one")
    return found[0] if found else None


@attrs.frozen
class GgufFile:
    """A GGUF's metadata and tensor table; the data stays memory-mapped in `reader`."""

    path: Path
    meta: Metadata
    types: dict[str, str]   # tensor name -> GGML type name (`Q4_1`, `F32`, ...)
    reader: Any             # gguf.GGUFReader

    @property
    def architecture(self) -> Architecture:
        spec = ARCHITECTURES.get(self.meta.arch)
        if spec is None:
            raise GgufError(f"--model: {self.path}: a GGUF of architecture "
                            f"{self.meta.arch!r}, which triode does not serve (it serves "
                            f"{', '.join(sorted(ARCHITECTURES))})")
        return spec

    def mlx_reads_all(self) -> bool:
        """Every tensor is of a type `mx.load` reads."""
        return set(self.types.values()) <= MLX_TYPES

    def quantized_types(self) -> set[str]:
        return {t for t in self.types.values() if t not in FLOAT_TYPES}


@functools.lru_cache(maxsize=4)
def read(path: Path) -> GgufFile:
    """The file's metadata and tensor table (gguf-py; nothing is copied). Kept for the
    startup check, the load and the description to share one read (a second or two for a
    large vocabulary)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise GgufError(f"--model: {path}: not a readable GGUF file "
                        f"({type(exc).__name__}: {exc})") from None
    values = {name: field.contents() for name, field in reader.fields.items()
              if not name.startswith("GGUF.")}
    arch = values.get("general.architecture")
    if not isinstance(arch, str):
        raise GgufError(f"--model: {path}: the GGUF names no general.architecture")
    return GgufFile(path, Metadata(values, arch),
                    {t.name: t.tensor_type.name for t in reader.tensors}, reader)


def mlx_name(spec: Architecture, name: str) -> str | None:
    """The mlx-lm parameter a GGUF tensor is (`blk.3.attn_q.weight` ->
    `model.layers.3.self_attn.q_proj.weight`; MLX's `.scales`/`.biases` of a quantized one
    likewise); None for a tensor that is no parameter (rotary factors)."""
    stem, _, kind = name.rpartition(".")
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        target = {**BLOCK_NAMES, **spec.names}.get(part)
        return None if target is None else f"model.layers.{layer}.{target}.{kind}"
    target = TOP_NAMES.get(stem)
    return None if target is None else f"{target}.{kind}"


def raw_tensors(gguf: GgufFile, keep_float: bool) -> dict[str, Any]:
    """The file's tensors under their GGUF names, as MLX arrays: what `mx.load` makes of them
    when it reads every type; otherwise gguf-py's dequantization, requantized unless
    `keep_float`."""
    import mlx.core as mx

    if gguf.mlx_reads_all():
        load: Any = mx.load
        loaded: dict[str, Any] = load(str(gguf.path), format="gguf")   # Ollama blobs: no suffix
        return loaded
    from gguf.quants import dequantize

    out: dict[str, Any] = {}
    for tensor in gguf.reader.tensors:
        kind = tensor.tensor_type.name
        if kind not in FLOAT_TYPES and kind not in REQUANTIZED_BITS:
            raise GgufError(f"--model: {gguf.path}: tensor {tensor.name} is of type {kind}, "
                            "which triode cannot read; use a file quantized as Q4_K_M, Q8_0 "
                            "or F16")
        values = mx.array(dequantize(tensor.data, tensor.tensor_type))
        if kind in FLOAT_TYPES or keep_float or values.ndim != 2:
            out[tensor.name] = values
            continue
        stem = tensor.name.removesuffix(".weight")
        quantize: Any = mx.quantize
        packed, scales, biases = quantize(values, group_size=GROUP_SIZE,
                                          bits=REQUANTIZED_BITS[kind])
        out[tensor.name], out[f"{stem}.scales"], out[f"{stem}.biases"] = packed, scales, biases
        mx.eval(packed, scales, biases)
    return out


def _unpermute(rows: Any, heads: int) -> Any:
    """Undoes llama.cpp's permutation of one projection's rows (per head: the two halves of
    the rotary pairs interleaved); packed quantized rows move whole, as their scales do."""
    shape = rows.shape
    return rows.reshape(heads, shape[0] // heads // 2, 2, *shape[1:]).swapaxes(1, 2) \
        .reshape(shape)


def parameters(gguf: GgufFile, config: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    """The model's parameters under mlx-lm's names, the converter's changes undone."""
    spec = gguf.architecture
    heads = {"attn_q": config["num_attention_heads"],
             "attn_k": config["num_key_value_heads"]}
    out: dict[str, Any] = {}
    for name, value in raw.items():
        target = mlx_name(spec, name)
        if target is None:
            continue
        part = name.split(".")[-2]
        if spec.unpermute_qk and part in heads:
            value = _unpermute(value, heads[part])
        if spec.norm_offset and part.endswith("norm"):
            value = value - spec.norm_offset
        out[target] = value
    return out


def config_for(gguf: GgufFile, raw: dict[str, Any]) -> dict[str, Any]:
    """mlx-lm's config.json for the model (`raw`: its tensors, for what they state)."""
    spec = gguf.architecture
    config = spec.config(gguf.meta)
    embedding = raw["token_embd.weight"]
    config.update(model_type=spec.model_type, vocab_size=int(embedding.shape[0]),
                  tie_word_embeddings="output.weight" not in raw)
    if all(n in raw for n in PHI3_ROPE_FACTORS.values()):
        config["rope_scaling"] = {"type": "longrope", **{
            key: [float(x) for x in raw[n].tolist()] for key, n in PHI3_ROPE_FACTORS.items()}}
    return config


def build_model(gguf: GgufFile, keep_float: bool, *, lazy: bool = False
                ) -> tuple[Any, dict[str, Any]]:
    """mlx-lm's model class for the architecture, holding the file's weights, and the
    config.json it was built from."""
    import mlx.core as mx
    import mlx.nn
    from mlx_lm.utils import _get_classes

    nn: Any = mlx.nn

    raw = raw_tensors(gguf, keep_float)
    config = config_for(gguf, raw)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    weights = parameters(gguf, config, raw)
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)

    def quantized(path: str, module: Any) -> bool | dict[str, int]:
        if not hasattr(module, "to_quantized") or f"{path}.scales" not in weights:
            return False
        bits = weights[f"{path}.weight"].shape[-1] * 32 \
            // (weights[f"{path}.scales"].shape[-1] * GROUP_SIZE)
        return {"group_size": GROUP_SIZE, "bits": bits}

    nn.quantize(model, class_predicate=quantized)
    model.load_weights(list(weights.items()), strict=True)
    if ROPE_FACTORS in raw:
        scale_rotary(model, config, raw[ROPE_FACTORS])
    if not lazy:
        mx.eval(model.parameters())
    model.eval()
    return model, config


class FactorRoPE:
    """Rotary embedding with per-frequency factors (llama.cpp's `rope_freqs`, how a GGUF
    states Llama 3.1's scaled rotary): frequency i is base^(2i/d) stretched by factor i,
    which is what mlx-lm's Llama3RoPE computes from the checkpoint's rope_scaling."""

    def __init__(self, dims: int, base: float, factors: Any):
        import mlx.core as mx

        self.dims = dims
        self._freqs = factors.astype(mx.float32) * base ** (mx.arange(0, dims, 2) / dims)

    def __call__(self, x: Any, offset: int = 0) -> Any:
        import mlx.core as mx

        return mx.fast.rope(x, self.dims, traditional=False, base=None, scale=1.0,
                            offset=offset, freqs=self._freqs)


def scale_rotary(model: Any, config: dict[str, Any], factors: Any) -> None:
    rope = FactorRoPE(config["head_dim"], config.get("rope_theta", 10_000.0), factors)
    for layer in model.layers:
        layer.self_attn.rope = rope


# ---- the tokenizer ----------------------------------------------------------------------------

def tokenizer_files(gguf: GgufFile) -> dict[str, Any]:
    """tokenizer.json and tokenizer_config.json of the file's tokenizer, as a Hugging Face
    repo of the model holds them."""
    from tokenizers import Regex, pre_tokenizers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    meta = gguf.meta
    tokens: list[str] = list(meta.get("tokenizer.ggml.tokens") or ())
    if not tokens:
        raise GgufError(f"--model: {gguf.path}: the GGUF holds no tokenizer")
    fields = {"tokenizer_type": "tokenizer.ggml.model", "pre_tokenizer_type": "tokenizer.ggml.pre",
              "merges": "tokenizer.ggml.merges", "scores": "tokenizer.ggml.scores",
              "token_type": "tokenizer.ggml.token_type",
              "add_prefix_space": "tokenizer.ggml.add_space_prefix"}
    described: dict[str, Any] = {"tokens": tokens}
    for name, key in fields.items():
        value = meta.get(key)
        if value is not None:
            described[name] = list(value) if isinstance(value, (list, tuple)) else value
    try:
        backend, _ = convert_gguf_tokenizer(meta.arch, described)
    except (ValueError, KeyError) as exc:
        raise GgufError(f"--model: {gguf.path}: its tokenizer cannot be rebuilt ({exc})"
                        ) from None
    splits = PRE_SPLITS.get(str(described.get("pre_tokenizer_type")))
    if splits is not None:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in splits]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer = _as_llama_cpp_reads_it(json.loads(backend.to_str()), meta, len(tokens))

    def token(key: str) -> str | None:
        index = meta.get(f"tokenizer.ggml.{key}")
        return tokens[int(index)] if index is not None and 0 <= int(index) < len(tokens) \
            else None

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos_token_id"), "eos_token": token("eos_token_id"),
        "unk_token": token("unknown_token_id"), "pad_token": token("padding_token_id"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(meta.model("context_length", 0)) or None,
        "chat_template": meta.get("tokenizer.chat_template"),
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}


# SentencePiece's space prefix as llama.cpp adds it (at the start and after each special
# token) and as the repositories' legacy tokenizer.json files write it.
SPM_PREFIX_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
SPM_PREFIX_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
# Phi-3's special tokens swallow the whitespace after them, but for these (llama.cpp's rule
# for the phi3 vocabulary, as Phi-3's own tokenizer.json marks them).
PHI3_KEEP_SPACE = ("<unk>", "<s>", "<|endoftext|>")


def _as_llama_cpp_reads_it(tokenizer: dict[str, Any], meta: Metadata, vocab_size: int
                           ) -> dict[str, Any]:
    """What transformers' mapping makes of a GGUF tokenizer, brought to what llama.cpp and the
    model's own repository do where the two differ: no added token past the vocabulary
    (GPT-2's default `<|endoftext|>`), a SentencePiece vocabulary's space prefix after special
    tokens too (unless the file says `add_space_prefix: false`, as Gemma's does), Phi-3's
    special tokens eating the space after them."""
    tokenizer["added_tokens"] = [t for t in tokenizer.get("added_tokens") or ()
                                 if t["id"] < vocab_size]
    spm = meta.get("tokenizer.ggml.model") == "llama"
    if spm and meta.get("tokenizer.ggml.add_space_prefix", True) \
            and not meta.arch.startswith("gemma"):
        tokenizer.update(normalizer=SPM_PREFIX_NORMALIZER, pre_tokenizer=None,
                         decoder=SPM_PREFIX_DECODER)
    if meta.arch == "phi3":
        for token in tokenizer["added_tokens"]:
            if token["special"] and token["content"] not in PHI3_KEEP_SPACE:
                token["rstrip"] = True
    return tokenizer


def stop_tokens(gguf: GgufFile) -> list[int]:
    """What ends generation: the metadata's end-of-sequence, end-of-turn and end-of-message
    ids, and the control tokens llama.cpp ends on as well (END_OF_TURN_TEXTS)."""
    meta = gguf.meta
    tokens = list(meta.get("tokenizer.ggml.tokens") or ())
    types = list(meta.get("tokenizer.ggml.token_type") or ())
    ids = {int(meta.get(f"tokenizer.ggml.{key}")) for key in
           ("eos_token_id", "eot_token_id", "eom_token_id")
           if meta.get(f"tokenizer.ggml.{key}") is not None}
    ids |= {i for i, (text, kind) in enumerate(zip(tokens, types))
            if kind == CONTROL and text in END_OF_TURN_TEXTS}
    return sorted(ids)


# Tokenizers built ahead of a load, in a worker thread (`prefetch_tokenizer`), by file: the
# load's `build_tokenizer` takes its file's (once).
_prefetched: dict[Path, Any] = {}
_prefetched_lock = threading.Lock()


def prefetch_tokenizer(path: Path) -> None:
    """Reads `path`'s metadata and builds its tokenizer now (no MLX: any thread), for the
    load that follows."""
    tokenizer = _build_tokenizer(read(path))
    with _prefetched_lock:
        _prefetched[path] = tokenizer


def build_tokenizer(gguf: GgufFile) -> Any:
    """mlx-lm's TokenizerWrapper around the rebuilt tokenizer (its streaming detokenizer, tool
    parser and reasoning markers found as for a model directory); the one built ahead for
    this file, if any."""
    with _prefetched_lock:
        ready = _prefetched.pop(gguf.path, None)
    return ready if ready is not None else _build_tokenizer(gguf)


def _build_tokenizer(gguf: GgufFile) -> Any:
    from mlx_lm import utils

    load_tokenizer: Any = utils.load_tokenizer
    with tempfile.TemporaryDirectory(prefix="triode-gguf-") as tmp:
        directory = Path(tmp)
        for name, content in tokenizer_files(gguf).items():
            (directory / name).write_text(json.dumps(content, ensure_ascii=False))
        # mlx-lm reads the model module's tokenizer defaults through config.json.
        (directory / "config.json").write_text(
            json.dumps({"model_type": gguf.architecture.model_type}))
        return load_tokenizer(directory, eos_token_ids=stop_tokens(gguf))


def load(path: Path, keep_float: bool, *, lazy: bool = False) -> tuple[Any, Any]:
    """The model and tokenizer a GGUF file holds (`keep_float`: see `raw_tensors`; `lazy`:
    the weights `mx.load` reads are left for the caller to evaluate, in pieces)."""
    gguf = read(path)
    gguf.architecture   # an architecture not served fails before anything loads
    return build_model(gguf, keep_float, lazy=lazy)[0], build_tokenizer(gguf)


def sampling_config(meta: Metadata) -> dict[str, Any]:
    """The sampling defaults a GGUF states (llama.cpp's `general.sampling.*`), in Hugging
    Face's generation_config.json terms."""
    names = {"temp": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p"}
    return {hf: meta.get(f"general.sampling.{key}") for key, hf in names.items()
            if meta.get(f"general.sampling.{key}") is not None}
