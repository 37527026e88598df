"""MLX's BLAS calls resolve to MKL after the preload (checked by the dynamic linker itself)."""

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() != "x86_64",
    reason="MKL is preloaded on Linux x86_64 only")

PROBE = """
import sys
from triode.model.blas import preload_blas
print(preload_blas(sys.argv[1]))
import mlx.core as mx
a = mx.ones((64, 64))
assert (a @ a)[0, 0].item() == 64.0
"""


def bindings(mode: str) -> tuple[str, str]:
    env = dict(os.environ, LD_DEBUG="bindings")
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True,
                         text=True, check=True)
    lines = [l for l in out.stderr.splitlines() if "libmlx" in l.split(" to ")[0]
             and "`cblas_sgemm'" in l]
    assert lines, "libmlx.so never bound cblas_sgemm"
    return out.stdout.strip(), lines[0].split(" to ")[1]


def test_auto_binds_mlx_sgemm_to_mkl():
    """With the default (auto) mode, libmlx.so's cblas_sgemm binds to libmkl_rt."""
    name, target = bindings("auto")
    assert name.startswith("mkl")
    assert "libmkl_rt" in target


def test_none_leaves_mlx_on_its_own_blas():
    """--blas none turns the preload off: libmlx.so binds to the BLAS it ships with."""
    name, target = bindings("none")
    assert name == "builtin"
    assert "libmkl" not in target
