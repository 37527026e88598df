"""Puts an optimized BLAS under MLX's Linux CPU backend.

MLX's Linux wheel calls `cblas_sgemm` and friends through the dynamic linker. A BLAS library
loaded with RTLD_GLOBAL *before* `mlx.core` is imported sits earlier in the global lookup scope
than the reference BLAS MLX brings, so MLX's calls resolve to it. Intel MKL (the `mkl` wheel,
a dependency on Linux x86_64) measured fastest here; see docs/benchmarks.md.

This module must not import mlx.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import sys
from pathlib import Path

log = logging.getLogger(__name__)

MODES = ("auto", "mkl", "none")
_loaded: str | None = None
_mkl: ctypes.CDLL | None = None   # libmkl_rt once preloaded, for its thread controls
_mkl_default_threads = 0          # MKL's own thread count, read at the preload

# `--blas-threads 0` (auto) gives MKL one thread for models narrower than this. Their matrices
# are too small for a second thread to pay (bench/blas_threads.py: hidden size 192, decode
# steps at batch 1-32 within noise of each other), while an idle OpenMP worker spins for
# KMP_BLOCKTIME (200 ms) after every parallel region and takes a core from the HTTP side:
# bundled model, C=32, that spinning worker used 10 s of CPU in an 11 s run.
# At hidden size 768 a second thread made batched decode steps 1.13-1.34x faster.
AUTO_SINGLE_THREAD_BELOW_HIDDEN = 512


def _candidate_dirs() -> list[Path]:
    dirs = [Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"]
    for entry in sys.path:
        if entry.endswith("site-packages"):
            dirs.append(Path(entry).parents[2])  # <prefix>/lib/pythonX.Y/site-packages → <prefix>/lib
    return dirs


def find_mkl() -> Path | None:
    for d in _candidate_dirs():
        for name in ("libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"):
            p = d / name
            if p.exists():
                return p
    return None


def preload_blas(mode: str = "auto") -> str:
    """Loads the BLAS `mode` asks for before MLX; returns a name for the startup log line.

    `auto` uses MKL on Linux when the wheel is installed; `none` leaves MLX's own BLAS.
    Idempotent: a second call reports what the first one loaded.
    """
    global _loaded, _mkl, _mkl_default_threads
    if mode not in MODES:
        raise ValueError(f"--blas must be one of {', '.join(MODES)}, not {mode!r}")
    if _loaded is not None:
        return _loaded
    if mode == "none" or platform.system() != "Linux":
        _loaded = "builtin" if platform.system() == "Linux" else "accelerate/metal"
        return _loaded
    if "mlx.core" in sys.modules:
        log.warning("mlx was imported before the BLAS preload; MLX keeps its own BLAS")
        _loaded = "builtin (mlx imported first)"
        return _loaded
    path = find_mkl()
    if path is None:
        if mode == "mkl":
            raise RuntimeError("--blas mkl: libmkl_rt not found; pip install mkl")
        _loaded = "builtin"
        return _loaded
    # One OpenMP runtime per process; MKL's Intel threading layer brings its own.
    os.environ.setdefault("MKL_THREADING_LAYER", "INTEL")
    _mkl = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    _mkl_default_threads = _mkl.MKL_Get_Max_Threads()
    _loaded = f"mkl ({path.name})"
    return _loaded


def auto_threads(hidden_size: int | None) -> int:
    """The thread count `--blas-threads 0` picks for a model: 1 below
    AUTO_SINGLE_THREAD_BELOW_HIDDEN, else 0 (MKL's own default)."""
    if hidden_size is not None and hidden_size < AUTO_SINGLE_THREAD_BELOW_HIDDEN:
        return 1
    return 0


def mkl() -> ctypes.CDLL | None:
    """MKL's runtime library when it is the BLAS in use (its vector math too), else None."""
    return _mkl


def set_threads(threads: int) -> int | None:
    """Caps MKL at `threads` (0: MKL's own default) for every thread of the process; returns
    the cap in effect, or None when MKL is not the BLAS in use."""
    if _mkl is None:
        return None
    _mkl.MKL_Set_Num_Threads(threads or _mkl_default_threads)
    return int(_mkl.MKL_Get_Max_Threads())


def sgemm_provider() -> str | None:
    """The shared object that `cblas_sgemm` resolves to in the global scope (Linux only)."""
    if platform.system() != "Linux":
        return None

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    libdl = ctypes.CDLL(ctypes.util.find_library("dl") or "libc.so.6")
    libdl.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    try:
        fn = ctypes.CDLL(None).cblas_sgemm
    except AttributeError:
        return None
    info = DlInfo()
    if not libdl.dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)):
        return None
    return str(info.dli_fname.decode())
