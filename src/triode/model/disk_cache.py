"""The prompt cache's disk tier (`--prompt-cache-dir`): KV caches the memory tier evicts, and
every entry it holds at shutdown, kept as files that survive restarts; a prompt that the disk
serves better than memory is prefilled from a file loaded back (docs/architecture.md,
"Prompt cache on disk").

It is the engine's, like the memory tier: the engine thread hands it evicted entries and asks
it for prefixes; a writer thread and a reader thread do the file work, so the step loop never
waits for the disk. The index (namespace, tokens → file) is in memory, rebuilt at startup
from the files' headers alone, and has its own LRU byte budget (`--prompt-cache-disk-bytes`).

Files live in a directory per cache key (`PATH/<key>/`): a digest of everything that decides
what a KV cache holds (the model's files, its quantization, `--kv-bits`,
`--attention-window`, the layers' cache types, mlx-lm's version, this format's version).
A server only ever reads its own key's directory, and every file names its key again in its
header, so an entry is only ever loaded into the configuration that wrote it.

A file: MAGIC, the header's length (u64 little-endian), the header (JSON: key, namespace,
tokens, each layer's cache class and state, the arrays' dtypes, shapes and offsets), the
arrays' bytes, and a CRC-32 of the header and those bytes. Written to a temporary file and renamed; a file
whose size, header or CRC is wrong is skipped with a warning and removed, never loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Iterable, Sequence

import attrs

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MAGIC = b"TRIODEKV"
PREAMBLE = struct.Struct("<8sQ")   # MAGIC, the header's length
TRAILER = struct.Struct("<I")      # CRC-32 of the header and the arrays' bytes
SUFFIX = ".kv"
TEMP_PREFIX = ".tmp-"
KEY_FILE = "key.json"
PROBE_FILE = ".triode-write-probe"
# A file is read back only when it serves at least this many tokens more than memory does,
# and at least this share of its own tokens (a file is read whole: reading a long entry for a
# short shared prefix, the template's first tokens, costs more than prefilling them).
MIN_GAIN_TOKENS = 16
MIN_SHARE = 0.25
# While a load is pending and nothing runs, the engine waits this long for it at a time
# before it looks for new commands again.
LOAD_POLL_SECONDS = 0.005


class CorruptEntry(Exception):
    """A file that cannot be loaded: wrong size, header, key or checksum."""


def check_directory(path: str) -> None:
    """Creates `path` if needed and proves it writable (raises OSError if not): an
    unwritable directory is a startup error, not a failure at the first eviction."""
    os.makedirs(path, exist_ok=True)
    probe = Path(path) / PROBE_FILE
    probe.write_bytes(b"")
    probe.unlink()


def cache_key(model: str, *, kv_bits: int, attention_window: int,
              layer_types: Sequence[str], weights: str = "") -> dict[str, Any]:
    """What decides the contents of a KV cache for a token sequence, as JSON: the model's
    files (a GGUF file, or a directory's config.json and weight files) and the precision they
    run in (`weights`, ModelInfo's)."""
    import mlx_lm

    from .sources import resolve

    source = resolve(model)
    path = Path(source.path)
    if source.gguf:
        st = path.resolve().stat()
        return {"format": FORMAT_VERSION, "model": str(path.resolve()),
                "files": [[path.name, st.st_size, st.st_mtime_ns]], "config_sha256": None,
                "quantization": None, "weights": weights, "kv_bits": kv_bits,
                "attention_window": attention_window, "layers": list(layer_types),
                "mlx_lm": mlx_lm.__version__}
    if not path.exists():   # a Hugging Face repo id: the local copy mlx-lm just loaded
        from huggingface_hub import snapshot_download
        from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

        path = Path(snapshot_download(model, allow_patterns=DEFAULT_ALLOW_PATTERNS,
                                      local_files_only=True))
    path = path.resolve()
    config = (path / "config.json").read_bytes()
    quantization = json.loads(config)
    quantization = quantization.get("quantization") or quantization.get("quantization_config")
    files = []
    for f in sorted(path.iterdir()):
        if f.suffix == ".safetensors" or f.name == "model.safetensors.index.json":
            st = f.stat()
            files.append([f.name, st.st_size, st.st_mtime_ns])
    return {"format": FORMAT_VERSION, "model": str(path), "files": files,
            "config_sha256": hashlib.sha256(config).hexdigest(), "quantization": quantization,
            "weights": weights, "kv_bits": kv_bits, "attention_window": attention_window,
            "layers": list(layer_types), "mlx_lm": mlx_lm.__version__}


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def layer_types(caches: Iterable[Any]) -> list[str]:
    """Cache class names, a CacheList's inner ones too: `CacheList(ArraysCache,KVCache)`."""
    from mlx_lm.models.cache import CacheList

    def name(c: Any) -> str:
        if isinstance(c, CacheList):
            return f"CacheList({','.join(name(x) for x in c.caches)})"
        return type(c).__name__

    return [name(c) for c in caches]


def entry_name(namespace: str, tokens: Sequence[int]) -> str:
    digest = hashlib.blake2b(namespace.encode() + b"\0", digest_size=20)
    digest.update(struct.pack(f"<{len(tokens)}q", *tokens))
    return digest.hexdigest() + SUFFIX


# ---- the index: pure bookkeeping, no files, no MLX ------------------------------------------

@attrs.define
class DiskEntry:
    name: str                 # its file's name in the key's directory
    namespace: str
    tokens: Any               # numpy int64 array
    size: int                 # bytes on disk
    trimmable: bool           # can be cut back to a shorter prefix (else: only extended)
    used: float               # last written or loaded (the file's mtime)


class DiskIndex:
    """The disk tier's entries and their LRU byte budget."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: dict[str, DiskEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> DiskEntry | None:
        return self._entries.get(name)

    def make_room(self, size: int) -> list[DiskEntry] | None:
        """Removes (and returns) the least recently used entries until `size` more bytes fit;
        None, removing nothing, when `size` is more than the whole budget."""
        if size > self.max_bytes:
            return None
        victims = []
        for entry in sorted(self._entries.values(), key=lambda e: e.used):
            if self.nbytes + size <= self.max_bytes:
                break
            victims.append(self.remove(entry.name))
        return [v for v in victims if v is not None]

    def add(self, entry: DiskEntry) -> None:
        self.remove(entry.name)
        self._entries[entry.name] = entry
        self.nbytes += entry.size

    def remove(self, name: str) -> DiskEntry | None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            self.nbytes -= entry.size
        return entry

    def touch(self, name: str, when: float) -> None:
        entry = self._entries.get(name)
        if entry is not None:
            entry.used = when

    def find(self, namespace: str, prompt: Any) -> tuple[DiskEntry, int] | None:
        """The entry that serves the most of `prompt` (a numpy int64 array) and how many of
        its tokens, as the memory tier would: a trimmable entry up to the common prefix, an
        untrimmable one only when the prompt extends it; always short of the last token."""
        import numpy as np

        limit = len(prompt) - 1
        best: tuple[DiskEntry, int] | None = None
        for entry in self._entries.values():
            if entry.namespace != namespace:
                continue
            n = min(len(entry.tokens), limit)
            differ = np.flatnonzero(entry.tokens[:n] != prompt[:n])
            common = int(differ[0]) if differ.size else n
            if entry.trimmable:
                reuse = common
            else:
                reuse = len(entry.tokens) if common == len(entry.tokens) else 0
            if reuse and (best is None or reuse > best[1]
                          or (reuse == best[1] and entry.used > best[0].used)):
                best = (entry, reuse)
        return best


# ---- files ----------------------------------------------------------------------------------

@attrs.frozen
class Encoded:
    """An entry ready to write: its header and its arrays' buffers (zero-copy views of
    evaluated MLX arrays, safe to read from another thread)."""

    name: str
    namespace: str
    tokens: tuple[int, ...]
    trimmable: bool
    header: bytes
    buffers: tuple[memoryview, ...]
    payload: int

    @property
    def size(self) -> int:
        return PREAMBLE.size + len(self.header) + self.payload + TRAILER.size


def cache_classes() -> dict[str, type]:
    """The cache classes a file may name: mlx-lm's and triode's quantized one."""
    import mlx_lm.models.cache as mlx_cache

    from .kvquant import SequenceQuantizedKVCache

    base: type = mlx_cache._BaseCache
    table = {n: v for n, v in vars(mlx_cache).items()
             if isinstance(v, type) and issubclass(v, base)}
    table["SequenceQuantizedKVCache"] = SequenceQuantizedKVCache
    return table


def encode(key: str, namespace: str, tokens: Sequence[int], kv: Sequence[Any]) -> Encoded:
    """In the engine thread: an entry's header and buffers (no copy of the arrays)."""
    import mlx.core as mx
    from mlx_lm.models.cache import can_trim_prompt_cache

    arrays: list[Any] = []

    def state(value: Any) -> Any:
        if isinstance(value, mx.array):
            arrays.append(value)
            return {"array": len(arrays) - 1}
        if isinstance(value, (list, tuple)):
            return {"list": [state(v) for v in value]}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TypeError(f"cannot store a {type(value).__name__} in a prompt cache file")

    classes = cache_classes()
    layers = []
    for c in kv:
        if type(c).__name__ not in classes:
            raise TypeError(f"cannot store a {type(c).__name__} in a prompt cache file")
        layers.append({"class": type(c).__name__, "state": state(c.state)})
    mx.eval(arrays)
    described, offset, buffers = [], 0, []
    for a in arrays:
        view = memoryview(a)
        described.append({"dtype": str(a.dtype).rsplit(".", 1)[-1], "shape": list(a.shape),
                          "offset": offset, "nbytes": view.nbytes})
        offset += view.nbytes
        buffers.append(view)
    tokens = tuple(int(t) for t in tokens)
    trimmable = bool(can_trim_prompt_cache(list(kv)))
    header = json.dumps({"key": key, "namespace": namespace, "tokens": tokens,
                         "trimmable": trimmable, "layers": layers, "arrays": described,
                         "payload": offset}).encode()
    return Encoded(entry_name(namespace, tokens), namespace, tokens, trimmable, header,
                   tuple(buffers), offset)


def write_file(directory: Path, entry: Encoded) -> None:
    """Writes `entry` to a temporary file and renames it into place (OSError on failure,
    the temporary file removed)."""
    temp = directory / f"{TEMP_PREFIX}{entry.name}.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(temp, "wb") as f:
            f.write(PREAMBLE.pack(MAGIC, len(entry.header)))
            f.write(entry.header)
            crc = zlib.crc32(entry.header)
            for view in entry.buffers:
                data = view if view.c_contiguous else view.tobytes()
                crc = zlib.crc32(data, crc)
                f.write(data)
            f.write(TRAILER.pack(crc))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, directory / entry.name)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def read_header(path: Path, key: str) -> tuple[dict[str, Any], int]:
    """A file's header and the offset of its arrays, checked against its size and `key`
    (CorruptEntry otherwise); reads the header only."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        preamble = f.read(PREAMBLE.size)
        if len(preamble) < PREAMBLE.size:
            raise CorruptEntry("shorter than its preamble")
        magic, length = PREAMBLE.unpack(preamble)
        if magic != MAGIC:
            raise CorruptEntry("not a triode prompt cache file")
        if PREAMBLE.size + length > size:
            raise CorruptEntry("truncated inside its header")
        try:
            header = json.loads(f.read(length))
            payload = int(header["payload"])
            tokens = header["tokens"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptEntry(f"unreadable header ({exc})") from None
    if header.get("key") != key:
        raise CorruptEntry("written for another model configuration")
    if not isinstance(tokens, list) or not tokens:
        raise CorruptEntry("no tokens in its header")
    expected = PREAMBLE.size + length + payload + TRAILER.size
    if size != expected:
        raise CorruptEntry(f"{size} bytes where its header says {expected} (truncated?)")
    return header, PREAMBLE.size + length


def read_arrays(path: Path, key: str) -> tuple[dict[str, Any], list[Any]]:
    """In the reader thread: a whole file, checked (CorruptEntry), and its arrays as MLX
    arrays (bfloat16 ones as uint16, reinterpreted by `decode` in the engine thread). The file
    is mapped, not read: the checksum and the arrays' one copy read the page cache directly."""
    import mmap

    import mlx.core as mx
    import numpy as np

    header, start = read_header(path, key)
    payload = int(header["payload"])
    arrays = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        if len(mapped) != start + payload + TRAILER.size:
            raise CorruptEntry("changed size while it was read")
        with memoryview(mapped) as whole, whole[start:start + payload] as body:
            (crc,) = TRAILER.unpack(whole[start + payload:])
            if zlib.crc32(whole[PREAMBLE.size:start + payload]) != crc:   # header too
                raise CorruptEntry("checksum mismatch")
            try:
                for a in header["arrays"]:
                    dtype = np.dtype("uint16" if a["dtype"] == "bfloat16" else a["dtype"])
                    # One expression: no view of the mapping outlives it, even on an error.
                    arrays.append(mx.array(np.frombuffer(   # a copy
                        body, dtype=dtype, offset=int(a["offset"]),
                        count=int(a["nbytes"]) // dtype.itemsize).reshape(a["shape"])))
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptEntry(f"unreadable arrays ({exc})") from None
    return header, arrays


def decode(header: dict[str, Any], arrays: list[Any]) -> list[Any]:
    """In the engine thread: the KV cache a file holds (CorruptEntry if it names unknown
    classes or malformed states)."""
    import mlx.core as mx

    for i, a in enumerate(header["arrays"]):
        if a["dtype"] == "bfloat16":
            arrays[i] = arrays[i].view(mx.bfloat16)

    def state(value: Any) -> Any:
        if isinstance(value, dict):
            if "array" in value:
                return arrays[value["array"]]
            return [state(v) for v in value["list"]]
        return value

    classes = cache_classes()
    try:
        return [classes[layer["class"]].from_state(state(layer["state"]))  # type: ignore[attr-defined]
                for layer in header["layers"]]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise CorruptEntry(f"unreadable cache state ({exc!r})") from None


# ---- the tier -------------------------------------------------------------------------------

@attrs.frozen
class DiskFigures:
    max_bytes: int        # --prompt-cache-disk-bytes
    entries: int
    bytes: int
    hits: int             # prompts prefilled from a file loaded back
    writes: int           # files written
    write_errors: int     # writes that failed (disk full, unwritable) or were dropped
    skipped: int          # files skipped as truncated, corrupt or another configuration's


@attrs.frozen
class Loaded:
    """A finished load: the cache (None when the file could not be loaded) and how many of
    the prompt's tokens it covers."""

    uid: int
    kv: list[Any] | None
    reuse: int


class DiskTier:
    """The disk tier of one engine. The engine thread calls `open`, `evicted`, `find`, `load`,
    `finished_loads`, `wait`, `close`; the index is shared with the writer and reader
    threads under a lock."""

    def __init__(self, directory: str, max_bytes: int, key: dict[str, Any],
                 pending_limit: int):
        self.key = key_digest(key)
        self.root = Path(directory)
        self.directory = self.root / self.key
        self._key_json = key
        self._index = DiskIndex(max_bytes)
        self._lock = threading.Lock()
        self._pending_limit = pending_limit   # bytes of evicted entries waiting to be written
        self._pending = 0
        self._writes: queue.Queue[Encoded | None] = queue.Queue()
        self._reads: queue.Queue[tuple[int, DiskEntry, int] | None] = queue.Queue()
        self._loaded: queue.Queue[tuple[int, DiskEntry, int, Any]] = queue.Queue()
        self.hits = self.writes = self.write_errors = self.skipped = 0
        self._threads: list[threading.Thread] = []

    # ---- engine thread ----------------------------------------------------------------------

    def open(self) -> None:
        """Makes the key's directory and rebuilds the index from its files' headers (removing
        leftover temporary files and files that cannot be loaded); then starts the threads."""
        import numpy as np

        self.directory.mkdir(parents=True, exist_ok=True)
        key_file = self.directory / KEY_FILE
        if not key_file.exists():
            temp = self.directory / (TEMP_PREFIX + KEY_FILE)
            temp.write_text(json.dumps(self._key_json, indent=1, sort_keys=True))
            os.replace(temp, key_file)
        for path in sorted(self.directory.iterdir()):
            if path.name.startswith(TEMP_PREFIX):
                path.unlink(missing_ok=True)   # a write a crash cut off
                continue
            if path.suffix != SUFFIX:
                continue
            try:
                header, _ = read_header(path, self.key)
                tokens = np.array(header["tokens"], dtype=np.int64)
                entry = DiskEntry(path.name, str(header["namespace"]), tokens,
                                  path.stat().st_size, bool(header["trimmable"]),
                                  path.stat().st_mtime)
            except (CorruptEntry, KeyError, ValueError, TypeError) as exc:
                self._skip(path, str(exc))
                continue
            except OSError as exc:
                log.warning("prompt cache: cannot read %s (%s); skipping it", path, exc)
                self.skipped += 1
                continue
            self._index.add(entry)
        over = self._index.make_room(0) or []   # a smaller budget than last time
        for victim in over:
            (self.directory / victim.name).unlink(missing_ok=True)
        log.info("prompt cache on disk: %s, %d entries, %d bytes (budget %d)", self.directory,
                 len(self._index), self._index.nbytes, self._index.max_bytes)
        for target in (self._write_loop, self._read_loop):
            thread = threading.Thread(target=target, name=f"triode-{target.__name__[1:]}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def evicted(self, namespace: str, tokens: Sequence[int], kv: Sequence[Any]) -> None:
        """An entry the memory tier let go: written by the writer thread, unless the disk
        already has it (then it only counts as used)."""
        self._keep(namespace, tokens, kv, bounded=True)

    def _keep(self, namespace: str, tokens: Sequence[int], kv: Sequence[Any], *,
              bounded: bool) -> None:
        name = entry_name(namespace, tokens)
        with self._lock:
            if name in self._index:
                self._index.touch(name, time.time())
                return
        try:
            encoded = encode(self.key, namespace, tokens, kv)
        except TypeError as exc:
            log.debug("prompt cache: not writing an entry: %s", exc)
            return
        if encoded.size > self._index.max_bytes:
            return   # never fits
        with self._lock:
            if bounded and self._pending + encoded.size > self._pending_limit:
                self.write_errors += 1
                log.warning("prompt cache: the disk writer is %d bytes behind; not writing "
                            "an evicted entry of %d tokens", self._pending, len(tokens))
                return
            self._pending += encoded.size
        self._writes.put(encoded)

    def find(self, namespace: str, prompt: Sequence[int], reused: int = 0
             ) -> tuple[DiskEntry, int] | None:
        """The entry worth loading for `prompt` when memory serves `reused` of its tokens (see
        MIN_GAIN_TOKENS), and how many tokens it serves; None when there is none."""
        import numpy as np

        with self._lock:
            found = self._index.find(namespace, np.asarray(prompt, dtype=np.int64))
        if found is None:
            return None
        entry, reuse = found
        if reuse - reused < MIN_GAIN_TOKENS or reuse < MIN_SHARE * len(entry.tokens):
            return None
        return found

    def load(self, uid: int, entry: DiskEntry, reuse: int) -> None:
        self._reads.put((uid, entry, reuse))

    def finished_loads(self) -> list[Loaded]:
        """The loads that finished since the last call, their caches made (in this thread:
        reinterpreting arrays is an MLX operation) and cut back to what they serve."""
        from mlx_lm.models.cache import trim_prompt_cache

        done = []
        while True:
            try:
                uid, entry, reuse, result = self._loaded.get_nowait()
            except queue.Empty:
                break
            kv = None
            if not isinstance(result, Exception):
                header = result[0]
                try:
                    if header["namespace"] != entry.namespace or \
                            header["tokens"] != entry.tokens.tolist():
                        raise CorruptEntry("its header changed since it was indexed")
                    kv = decode(*result)
                    if len(entry.tokens) > reuse:
                        trim_prompt_cache(kv, len(entry.tokens) - reuse)
                except CorruptEntry as exc:
                    result = exc
                    kv = None
            if isinstance(result, CorruptEntry):
                self._skip(self.directory / entry.name, str(result), entry.name)
            elif isinstance(result, Exception):
                log.warning("prompt cache: cannot load %s (%s)", entry.name, result)
                with self._lock:
                    self._index.remove(entry.name)
            done.append(Loaded(uid, kv, reuse if kv is not None else 0))
        return done

    def wait(self, timeout: float) -> None:
        """Blocks until a load finishes or `timeout` passes (the engine has nothing else)."""
        try:
            item = self._loaded.get(timeout=timeout)
        except queue.Empty:
            return
        self._loaded.put(item)   # for finished_loads, in order with the rest

    def counted_hit(self) -> None:
        self.hits += 1

    def close(self, entries: Iterable[tuple[str, list[int], Any]]) -> None:
        """At the engine's end: writes every entry of the memory tier that the disk lacks,
        then stops the threads once the writes are done."""
        kept = list(entries)
        if kept:
            log.info("prompt cache: writing %d entries to %s", len(kept), self.directory)
        for namespace, tokens, kv in kept:
            try:
                self._keep(namespace, tokens, kv, bounded=False)
            except Exception:   # an engine that died may hold unusable arrays: the rest go on
                log.warning("prompt cache: cannot write an entry at shutdown", exc_info=True)
        self._reads.put(None)
        self._writes.put(None)
        for thread in self._threads:
            thread.join()

    def figures(self) -> DiskFigures:
        with self._lock:
            return DiskFigures(self._index.max_bytes, len(self._index), self._index.nbytes,
                               self.hits, self.writes, self.write_errors, self.skipped)

    def _skip(self, path: Path, reason: str, name: str | None = None) -> None:
        log.warning("prompt cache: skipping %s: %s", path, reason)
        with self._lock:
            self.skipped += 1
            if name is not None:
                self._index.remove(name)
        if not reason.startswith("written for another"):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass

    # ---- the writer and reader threads -------------------------------------------------------

    def _write_loop(self) -> None:
        import numpy as np

        while (entry := self._writes.get()) is not None:
            try:
                with self._lock:
                    victims = self._index.make_room(entry.size) or []
                for victim in victims:
                    (self.directory / victim.name).unlink(missing_ok=True)
                write_file(self.directory, entry)
                with self._lock:
                    self._index.add(DiskEntry(entry.name, entry.namespace,
                                              np.array(entry.tokens, dtype=np.int64),
                                              entry.size, entry.trimmable, time.time()))
                    self.writes += 1
            except OSError as exc:
                with self._lock:
                    self.write_errors += 1
                log.warning("prompt cache: cannot write an entry of %d tokens to %s (%s); "
                            "serving on without it", len(entry.tokens), self.directory,
                            exc.strerror or exc)
            finally:
                with self._lock:
                    self._pending -= entry.size

    def _read_loop(self) -> None:
        while (job := self._reads.get()) is not None:
            uid, entry, reuse = job
            path = self.directory / entry.name
            result: Any
            began = time.perf_counter()
            try:
                result = read_arrays(path, self.key)
                log.debug("prompt cache: read %d tokens (%d bytes) from %s in %.3f s",
                          len(entry.tokens), entry.size, entry.name,
                          time.perf_counter() - began)
                now = time.time()
                os.utime(path, (now, now))
                with self._lock:
                    self._index.touch(entry.name, now)
            except (CorruptEntry, OSError) as exc:
                result = exc
            except Exception as exc:   # any malformed content is a corrupt file
                result = CorruptEntry(f"unreadable ({exc!r})")
            self._loaded.put((uid, entry, reuse, result))

