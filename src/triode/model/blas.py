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
    global _loaded
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
    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    _loaded = f"mkl ({path.name})"
    return _loaded


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
    return info.dli_fname.decode()
