"""The precision weights run in on a CPU (`--cpu-weights`), at the edges of its memory rule."""

from __future__ import annotations

import pytest

from triode.model import blas

blas.preload_blas("auto")

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402

from triode.model import precision  # noqa: E402

PARAMETERS = 1000   # float32: 4,000 bytes


@pytest.mark.parametrize("available, expected", [
    (8000, True),     # float32 weights exactly half of what is available
    (7999, False),    # one byte less available: they would take more than half
    (0, False),
    (None, False),    # nothing known: as stored
])
def test_auto_runs_float32_when_it_takes_at_most_half_the_memory(monkeypatch, available,
                                                                   expected):
    monkeypatch.setattr(precision, "available_memory", lambda: available)
    assert precision.wants_float32("auto", PARAMETERS) is expected


def test_the_flag_forces_either_way(monkeypatch):
    monkeypatch.setattr(precision, "available_memory", lambda: 0)
    assert precision.wants_float32("float32", PARAMETERS)
    monkeypatch.setattr(precision, "available_memory", lambda: 10**12)
    assert not precision.wants_float32("native", PARAMETERS)


def test_off_the_cpu_weights_run_as_stored(monkeypatch):
    monkeypatch.setattr(precision, "on_cpu", lambda: False)
    assert not precision.wants_float32("float32", PARAMETERS)
    assert not precision.wants_float32("auto", PARAMETERS)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 64)
        self.proj = nn.Linear(64, 64)
        self.norm = nn.RMSNorm(64)


def test_quantized_layers_dequantize_in_float32_exactly():
    """A quantized model in float32: its weights are exactly the dequantized values, computed
    in float32 (not through the float16 scales' precision), biases kept."""
    mx.random.seed(0)
    model = Tiny()
    nn.quantize(model, group_size=32, bits=4)
    model.set_dtype(mx.float16)
    proj = model.proj
    expected = mx.dequantize(proj.weight, proj.scales.astype(mx.float32),
                             proj.biases.astype(mx.float32), 32, 4)
    bias = proj.bias
    assert precision.describe(model) == "4-bit"
    assert precision.parameter_count(model) == 64 * 64 * 2 + 64 + 64
    precision.to_float32(model)
    assert isinstance(model.proj, nn.Linear) and isinstance(model.embed, nn.Embedding)
    assert mx.array_equal(model.proj.weight, expected)
    assert mx.array_equal(model.proj.bias, bias.astype(mx.float32))
    assert precision.describe(model) == "float32"


def test_half_precision_is_cast():
    model = Tiny()
    model.set_dtype(mx.bfloat16)
    assert precision.describe(model) == "bfloat16"
    precision.to_float32(model)
    assert precision.describe(model) == "float32"
