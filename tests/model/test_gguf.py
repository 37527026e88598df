"""GGUF files served directly: each architecture's fixture written both as an mlx-lm directory
and as llama.cpp's converter writes it (tests/fixtures/gguf_files.py, checked against
llama.cpp itself) gives the same logits on the same tokens and the same tokenization."""

from __future__ import annotations

from pathlib import Path

import pytest

from triode.model import blas

blas.preload_blas("auto")

import mlx.core as mx  # noqa: E402

from triode.errors import SettingsError  # noqa: E402
from triode.model import gguf  # noqa: E402
from triode.model.loading import check_model, load_model, LoadOptions  # noqa: E402

from ..fixtures.gguf_files import ARCHS, MIXED_TEXT, build_pair  # noqa: E402

TOKENS = [5, 17, 33, 2, 90, 41, 8, 300, 12, 77, 150, 61, 9, 44, 21, 3, 250, 18, 99, 6] * 3
# Relative to the largest logit. Float32: rounding. F16 and BF16 weights run in that
# precision (the directory's in float32). Quantized ones: MLX's quantized matrix product
# against the dequantized float weights (the same numbers, summed in another order).
TOLERANCE = {"f32": 1e-4, "f16": 2e-3, "bf16": 1e-2, "q8_0": 2e-2, "q4_0": 2e-2,
             "q4_1": 2e-2}


def logits(model) -> mx.array:
    return model(mx.array([TOKENS]))[0].astype(mx.float32)


def directory_model(pair):
    from mlx_lm import load

    return load(str(pair.directory))


@pytest.mark.parametrize("arch", ARCHS)
def test_each_architecture_gives_the_directorys_logits(tmp_path, arch):
    """float32 GGUF against the mlx-lm directory it was written from: the same logits."""
    pair = build_pair(arch, tmp_path)
    expected = logits(directory_model(pair)[0])
    model, _ = gguf.load(pair.gguf, keep_float=False)
    assert float(mx.max(mx.abs(logits(model) - expected))) < TOLERANCE["f32"]


@pytest.mark.parametrize("weight_type", ["f16", "bf16", "q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("arch", ["llama", "gemma3", "phi3"])
def test_every_type_mlx_reads(tmp_path, arch, weight_type):
    """F16 and BF16 as they are, Q4_0, Q4_1 and Q8_0 kept quantized as MLX reads them: the
    directory's model (the same numbers, multiplied in another precision or order)."""
    pair = build_pair(arch, tmp_path, weight_type)
    expected = logits(directory_model(pair)[0])
    model, _ = gguf.load(pair.gguf, keep_float=False)
    assert float(mx.max(mx.abs(logits(model) - expected))) < TOLERANCE[weight_type] * \
        max(1.0, float(mx.max(mx.abs(expected))))


@pytest.mark.parametrize("weight_type", ["q4_k", "q6_k"])
@pytest.mark.parametrize("arch", ["llama", "gemma3", "phi3"])
def test_k_quants_are_requantized_to_mlx_affine(tmp_path, arch, weight_type):
    """A type MLX does not read is dequantized and requantized to MLX affine with
    REQUANTIZED_BITS, groups of 32: exactly the directory's model quantized so by MLX (what
    that costs against the file's own values is measured on SmolLM2, docs/models.md)."""
    import mlx.nn as nn

    pair = build_pair(arch, tmp_path, weight_type)
    reference = directory_model(pair)[0]
    bits = gguf.REQUANTIZED_BITS[weight_type.upper()]
    nn.quantize(reference, group_size=gguf.GROUP_SIZE, bits=bits,
                class_predicate=lambda path, module: hasattr(module, "to_quantized")
                and getattr(module, "weight", mx.zeros((1,))).ndim == 2)
    model, _ = gguf.load(pair.gguf, keep_float=False)
    assert float(mx.max(mx.abs(logits(model) - logits(reference)))) < TOLERANCE["f32"] * 10


@pytest.mark.parametrize("arch", ["llama", "phi3"])
def test_k_quants_kept_float_are_exact(tmp_path, arch):
    """A K-quant dequantized into float32 (what a CPU runs) is the directory's model."""
    pair = build_pair(arch, tmp_path, "q4_k")
    expected = logits(directory_model(pair)[0])
    model, _ = gguf.load(pair.gguf, keep_float=True)
    assert float(mx.max(mx.abs(logits(model) - expected))) < TOLERANCE["f32"]


@pytest.mark.parametrize("arch", ARCHS)
def test_each_architecture_tokenizes_as_its_repository(tmp_path, arch):
    """The tokenizer rebuilt from the GGUF splits a mixed-script text (digits, spaces, emoji,
    control tokens) into the ids the repository's tokenizer gives, and decodes them back."""
    pair = build_pair(arch, tmp_path)
    _, expected_tokenizer = directory_model(pair)
    tokenizer = gguf.build_tokenizer(gguf.read(pair.gguf))
    expected = expected_tokenizer.encode(MIXED_TEXT, add_special_tokens=False)
    assert tokenizer.encode(MIXED_TEXT, add_special_tokens=False) == expected
    assert tokenizer.decode(expected) == expected_tokenizer.decode(expected)
    assert set(expected_tokenizer.eos_token_ids) <= set(tokenizer.eos_token_ids)
    messages = [{"role": "user", "content": "Hi there 42"}]
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                         tokenize=False) == \
        expected_tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                               tokenize=False)


def test_served_through_the_loader_in_float32(tmp_path):
    """`--model FILE.gguf` with `--cpu-weights float32`: quantized weights run dequantized,
    and the model says so."""
    pair = build_pair("qwen3", tmp_path, "q8_0")
    loaded = load_model(str(pair.gguf), LoadOptions(cpu_weights="float32"))
    assert loaded.weights == "float32 (stored as 8-bit)"
    expected = logits(directory_model(pair)[0])
    assert float(mx.max(mx.abs(logits(loaded.model) - expected))) < 1e-4
    native = load_model(str(pair.gguf), LoadOptions(cpu_weights="native"))
    assert native.weights == "8-bit"


def test_a_directory_holding_one_gguf_is_that_file(tmp_path):
    pair = build_pair("llama", tmp_path)
    holder = tmp_path / "holder"
    holder.mkdir()
    (holder / "model.gguf").symlink_to(pair.gguf)
    assert gguf.locate(str(holder)) == holder / "model.gguf"
    (holder / "other.gguf").symlink_to(pair.gguf)
    with pytest.raises(SettingsError, match="2 GGUF files"):
        gguf.locate(str(holder))


def test_an_architecture_not_served_is_a_one_line_startup_error(tmp_path):
    """A GGUF of another architecture is refused before anything loads, naming it."""
    import gguf as gguf_py

    path = tmp_path / "other.gguf"
    writer = gguf_py.GGUFWriter(path, "mamba")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(SettingsError, match="architecture 'mamba', which triode does not "
                                            "serve") as raised:
        check_model(str(path))
    assert "\n" not in str(raised.value)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"not a gguf file at all")
    with pytest.raises(SettingsError, match="not a readable GGUF file"):
        check_model(str(path))


def test_a_type_triode_cannot_read_is_named(tmp_path):
    """A tensor of a type neither MLX nor the requantizing path reads (here MXFP4) is a
    startup error naming the tensor, the type and what to use instead."""
    import gguf as gguf_py
    import numpy as np

    path = tmp_path / "mxfp4.gguf"
    writer = gguf_py.GGUFWriter(path, "llama")
    kind = gguf_py.GGMLQuantizationType.MXFP4
    block, size = gguf_py.GGML_QUANT_SIZES[kind]
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((4, 64 // block * size), np.uint8),
                      raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(SettingsError, match="tensor blk.0.attn_q.weight is of type MXFP4, "
                                            "which triode cannot read; use a file quantized"):
        gguf.raw_tensors(gguf.read(path), keep_float=True)
