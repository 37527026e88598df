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


THREADS_PROBE = """
import os, sys
from triode.model import blas
blas.preload_blas("auto")
cap = blas.set_threads(int(sys.argv[1]))
import mlx.core as mx
a = mx.random.normal((256, 1024))
b = mx.random.normal((1024, 4096))
for _ in range(5):
    mx.eval(a @ b)
workers = sum(open(f"/proc/self/task/{t}/comm").read().strip() == "openmp_worker"
              for t in os.listdir("/proc/self/task"))
print(cap, blas._mkl_default_threads, workers)
"""


def mkl_threads(threads: int) -> tuple[int, int, int]:
    """(cap in effect, MKL's default, OpenMP worker threads after a large matmul)."""
    out = subprocess.run([sys.executable, "-c", THREADS_PROBE, str(threads)],
                         capture_output=True, text=True, check=True)
    cap, default, workers = map(int, out.stdout.split())
    return cap, default, workers


def test_one_blas_thread_starts_no_openmp_worker():
    """`--blas-threads 1` (what auto picks for the bundled model): MKL computes on the calling
    thread, so no OpenMP worker exists to spin and take a core from the HTTP side."""
    cap, _, workers = mkl_threads(1)
    assert (cap, workers) == (1, 0)


def test_zero_restores_mkl_default():
    cap, default, workers = mkl_threads(0)
    assert cap == default >= 1
    # With more than one core MKL threads a 256x1024x4096 matmul: workers exist.
    assert workers == default - 1


def test_auto_rule():
    from triode.model.blas import AUTO_SINGLE_THREAD_BELOW_HIDDEN, auto_threads

    assert auto_threads(192) == 1                                      # the bundled model
    assert auto_threads(AUTO_SINGLE_THREAD_BELOW_HIDDEN - 1) == 1
    assert auto_threads(AUTO_SINGLE_THREAD_BELOW_HIDDEN) == 0          # MKL's default
    assert auto_threads(None) == 0                                     # unknown: don't guess
