"""MLX's memory, as the models registry measures it: what is in use, what the device can
hold, and giving back what an unloaded model left in MLX's buffer cache."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os


def active_bytes() -> int:
    """Bytes MLX holds in arrays now (its allocator's count, not an estimate)."""
    import mlx.core as mx

    return int(mx.get_active_memory())


def device_bytes() -> int:
    """The memory the device has, as MLX reports it (`memory_size`); on a CPU, where MLX
    does not report it, the machine's RAM."""
    import mlx.core as mx

    reported = mx.device_info().get("memory_size")
    if isinstance(reported, int) and reported > 0:
        return reported
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def release() -> None:
    """Returns what unloaded models left: their arrays are collected, MLX's buffer cache
    is emptied, and the C heap's free pages go back to the system (glibc keeps freed memory
    in its arenas otherwise: the tokenizer's, the load's buffers). Called in the engine
    host thread after an engine ends."""
    import mlx.core as mx

    gc.collect()
    mx.clear_cache()
    trim_heap()


def trim_heap() -> None:
    """glibc's malloc_trim(0); nothing where the C library has none (macOS, musl)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
