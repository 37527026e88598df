"""The precision weights run in: on a CPU, float32 when memory allows.

MLX's CPU backend runs float32 matrix products through the BLAS under it (MKL on Linux x86_64,
model/blas.py), and everything else (quantized matrix products, float16 and bfloat16 ones) in
its own scalar kernels. On this kind of machine that makes float32 the fastest way to run a
model, however it is stored: SmolLM2-135M's Q4_1 weights decode 3x faster dequantized to
float32 than as MLX 4-bit, its bfloat16 ones 4x (docs/benchmarks.md). So with
`--cpu-weights auto` (the default) a model on the CPU runs in float32 when its float32 weights
take at most FLOAT32_MEMORY_SHARE of the memory available at load; `float32` forces it,
`native` keeps the weights as stored (and on Metal they always are).
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)

MODES = ("auto", "float32", "native")
FLOAT32_MEMORY_SHARE = 0.5   # of the memory available at load, at most, for float32 weights


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux's MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def on_cpu() -> bool:
    import mlx.core as mx

    return bool(mx.default_device() == mx.cpu)


def wants_float32(mode: str, parameters: int) -> bool:
    """Whether a model of `parameters` weights runs in float32 under `--cpu-weights mode`."""
    if mode == "native" or not on_cpu():
        return False
    if mode == "float32":
        return True
    available = available_memory()
    return available is not None and parameters * 4 <= available * FLOAT32_MEMORY_SHARE


def parameter_count(model: Any) -> int:
    """The model's weights, counting a quantized matrix's by its unpacked size."""
    from mlx_lm import utils

    count: Any = utils.get_total_parameters
    return int(count(model))


def describe(model: Any) -> str:
    """How the weights are stored: `float32`, `bfloat16`, `4-bit`, `4/8-bit` (mixed)."""
    import mlx.core as mx
    from mlx import utils

    bits = sorted({m.bits for _, m in model.named_modules()
                   if hasattr(m, "bits") and hasattr(m, "scales")})
    if bits:
        return "/".join(str(b) for b in bits) + "-bit"
    flatten: Any = utils.tree_flatten
    dtypes = {v.dtype for _, v in flatten(model.parameters())
              if mx.issubdtype(v.dtype, mx.floating)}
    names = {mx.float32: "float32", mx.float16: "float16", mx.bfloat16: "bfloat16"}
    return "+".join(sorted(names.get(d, str(d)) for d in dtypes)) or "none"


def to_float32(model: Any, *, lazy: bool = False) -> None:
    """Dequantizes every quantized layer (in float32, not the scales' own float16) and casts
    every floating parameter to float32, in place. `lazy`: nothing is evaluated (the engine
    evaluates the weights in pieces)."""
    import mlx.core as mx
    import mlx.nn
    from mlx.utils import tree_unflatten
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    nn: Any = mlx.nn

    replaced = []
    for name, module in model.named_modules():
        if isinstance(module, nn.QuantizedLinear):
            plain: Any = nn.Linear(1, 1, bias="bias" in module)
        elif isinstance(module, nn.QuantizedEmbedding):
            plain = nn.Embedding(1, 1)
        elif isinstance(module, QuantizedSwitchLinear):
            plain = SwitchLinear(1, 1, 1, bias="bias" in module)
        else:
            continue
        biases = module.get("biases")
        plain.weight = mx.dequantize(
            module.weight, module.scales.astype(mx.float32),
            None if biases is None else biases.astype(mx.float32),
            module.group_size, module.bits, module.mode)
        if "bias" in module:
            plain.bias = module.bias
        if not lazy:
            mx.eval(plain.weight)
        replaced.append((name, plain))
    if replaced:
        model.update_modules(tree_unflatten(replaced))
    model.set_dtype(mx.float32)
    if not lazy:
        mx.eval(model.parameters())
