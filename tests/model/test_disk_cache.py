"""The prompt cache's disk tier: the index's matching and LRU byte budget at its edges, the
file format on every cache class the prompt cache holds, and files that must never load."""

import time
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
mx = pytest.importorskip("mlx.core")

from triode.model import disk_cache  # noqa: E402
from triode.model.disk_cache import (CorruptEntry, DiskEntry, DiskIndex, DiskTier,  # noqa: E402
                                     decode, encode, read_arrays, read_header, write_file)

KEY = "k" * 24


def entry(name: str, size: int, used: float, tokens=(1, 2, 3), *, namespace="model",
          trimmable=True) -> DiskEntry:
    return DiskEntry(name, namespace, np.array(tokens, dtype=np.int64), size, trimmable, used)


# ---- the index --------------------------------------------------------------------------

def test_an_entry_exactly_the_budget_fits_and_one_byte_more_does_not():
    """make_room admits an entry of exactly max_bytes (evicting everything) and refuses one
    byte more without evicting anything."""
    index = DiskIndex(100)
    index.add(entry("a", 40, 1.0))
    assert index.make_room(101) is None
    assert len(index) == 1 and index.nbytes == 40
    victims = index.make_room(100)
    assert [v.name for v in victims] == ["a"]
    assert index.nbytes == 0


def test_a_zero_budget_admits_nothing():
    """--prompt-cache-disk-bytes 0: every entry is larger than the budget."""
    index = DiskIndex(0)
    assert index.make_room(1) is None
    assert index.make_room(0) == []


def test_the_least_recently_used_entries_go_first_and_only_as_many_as_needed():
    index = DiskIndex(100)
    for name, used in (("new", 3.0), ("old", 1.0), ("mid", 2.0)):
        index.add(entry(name, 30, used))
    assert [v.name for v in index.make_room(20)] == ["old"]
    assert index.nbytes == 60
    index.touch("mid", 9.0)   # used again: now the newest
    assert [v.name for v in index.make_room(80)] == ["new", "mid"]


def test_find_serves_as_much_of_the_prompt_as_an_entry_can():
    """A trimmable entry serves the common prefix, an untrimmable one only a prompt that
    extends it; never the prompt's last token; only the prompt's namespace."""
    index = DiskIndex(1000)
    index.add(entry("trim", 1, 1.0, (1, 2, 3, 4, 5, 6)))
    index.add(entry("whole", 1, 1.0, (1, 2, 3, 4), trimmable=False))
    index.add(entry("other", 1, 1.0, (1, 2, 3, 4, 5, 6, 7), namespace="tenant"))
    found = index.find("model", np.array([1, 2, 3, 4, 5, 9, 9]))
    assert (found[0].name, found[1]) == ("trim", 5)
    assert index.find("model", np.array([1, 2, 3, 4, 5, 6]))[1] == 5   # last token: prefilled
    index.remove("trim")
    assert index.find("model", np.array([1, 2, 3, 4, 8]))[0].name == "whole"
    assert index.find("model", np.array([1, 2, 3, 4])) is None   # would need the last token
    assert index.find("model", np.array([1, 2, 9, 9, 9])) is None   # diverges inside it
    assert index.find("tenant", np.array([1, 2, 3, 4, 5, 6, 7, 8]))[1] == 7


# ---- files ----------------------------------------------------------------------------------

def kv_caches():
    """One of each cache class the prompt cache holds, with content."""
    from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache

    from triode.model.kvquant import SequenceQuantizedKVCache

    keys = mx.random.normal((1, 2, 40, 64)).astype(mx.bfloat16)
    values = mx.random.normal((1, 2, 40, 64)).astype(mx.bfloat16)
    plain = KVCache()
    plain.update_and_fetch(keys, values)
    rotating = RotatingKVCache(max_size=16)
    rotating.update_and_fetch(keys, values)
    arrays = ArraysCache(2)
    arrays[0] = mx.random.normal((1, 3, 8))
    arrays[1] = mx.random.normal((1, 4, 4)).astype(mx.float16)
    quantized = SequenceQuantizedKVCache(group_size=64, bits=4)
    quantized.update_and_fetch(keys, values)
    both = CacheList(ArraysCache(1), KVCache())
    both.caches[0][0] = mx.ones((1, 5))
    both.caches[1].update_and_fetch(keys[..., :7, :], values[..., :7, :])
    caches = [plain, rotating, arrays, quantized, both]
    mx.eval([c.state for c in caches])
    return caches


def arrays_of(kv) -> list:
    from mlx.utils import tree_flatten

    return [leaf for _, leaf in tree_flatten([c.state for c in kv]) if isinstance(leaf, mx.array)]


def written(tmp_path: Path, kv, tokens=tuple(range(40)), namespace="model") -> Path:
    encoded = encode(KEY, namespace, tokens, kv)
    write_file(tmp_path, encoded)
    path = tmp_path / encoded.name
    assert path.stat().st_size == encoded.size
    return path


def test_every_cache_class_round_trips_exactly(tmp_path):
    """KVCache, RotatingKVCache, ArraysCache, CacheList and the quantized cache come back
    with the same classes, arrays (dtypes included) and offsets."""
    kv = kv_caches()
    header, arrays = read_arrays(written(tmp_path, kv), KEY)
    back = decode(header, arrays)
    assert [type(c) for c in back] == [type(c) for c in kv]
    before, after = arrays_of(kv), arrays_of(back)
    assert len(before) == len(after)
    for x, y in zip(before, after):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert mx.array_equal(x, y).item()
    assert back[0].offset == 40 and back[1].offset == 40 and back[1]._idx == kv[1]._idx
    assert back[3].bits == 4 and back[3].offset == 40
    assert header["tokens"] == list(range(40)) and header["namespace"] == "model"


def test_a_truncated_file_is_refused_by_its_header(tmp_path):
    path = written(tmp_path, kv_caches())
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(CorruptEntry, match="truncated"):
        read_header(path, KEY)
    path.write_bytes(data[:20])
    with pytest.raises(CorruptEntry):
        read_header(path, KEY)
    path.write_bytes(b"")
    with pytest.raises(CorruptEntry):
        read_header(path, KEY)


def test_a_flipped_byte_is_refused_by_the_checksum(tmp_path):
    path = written(tmp_path, kv_caches())
    data = bytearray(path.read_bytes())
    data[-50] ^= 0xFF
    path.write_bytes(bytes(data))
    read_header(path, KEY)   # the header cannot tell
    with pytest.raises(CorruptEntry, match="checksum"):
        read_arrays(path, KEY)


def test_another_configurations_file_is_refused(tmp_path):
    path = written(tmp_path, kv_caches())
    with pytest.raises(CorruptEntry, match="another model configuration"):
        read_header(path, "x" * 24)


def test_the_key_covers_the_configuration(tmp_path):
    """Another --kv-bits, window, layer kind, or weights file is another key."""
    from triode.model.loading import BUNDLED_PATH

    def key(**kw):
        args = {"kv_bits": 0, "attention_window": 0, "layer_types": ["KVCache"], **kw}
        return disk_cache.key_digest(disk_cache.cache_key(str(BUNDLED_PATH), **args))

    assert key() == key()
    assert len({key(), key(kv_bits=8), key(attention_window=64),
                key(layer_types=["RotatingKVCache"])}) == 4
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"1234")
    before = disk_cache.key_digest(disk_cache.cache_key(
        str(model), kv_bits=0, attention_window=0, layer_types=[]))
    (model / "model.safetensors").write_bytes(b"12345")   # other weights
    after = disk_cache.key_digest(disk_cache.cache_key(
        str(model), kv_bits=0, attention_window=0, layer_types=[]))
    assert before != after


# ---- the tier -------------------------------------------------------------------------------

def tier(tmp_path: Path, budget: int) -> DiskTier:
    t = DiskTier(str(tmp_path), budget, {"test": 1}, pending_limit=1 << 30)
    t.open()
    return t


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_evicted_entry_is_written_found_and_loaded_back(tmp_path):
    kv = kv_caches()[:1]
    t = tier(tmp_path, 1 << 30)
    tokens = list(range(40))
    t.evicted("model", tokens, kv)
    wait_for(lambda: t.figures().writes == 1)
    found = t.find("model", tokens + [99])
    assert found is not None and found[1] == 40
    t.load(7, *found)
    loaded: list = []
    wait_for(lambda: loaded.extend(t.finished_loads()) or loaded)
    (done,) = loaded
    assert done.uid == 7 and done.reuse == 40
    assert mx.array_equal(done.kv[0].keys, kv[0].keys).item()
    t.evicted("model", tokens, kv)   # already there: not written again
    t.close([])
    assert t.figures().writes == 1


def test_the_index_is_rebuilt_from_the_directory_and_kept_within_a_smaller_budget(tmp_path):
    kv = kv_caches()[:1]
    t = tier(tmp_path, 1 << 30)
    t.close([("model", list(range(40)), kv), ("model", list(range(100, 140)), kv)])
    first = t.figures()
    assert first.entries == 2 and first.writes == 2
    again = tier(tmp_path, 1 << 30)
    assert again.figures().entries == 2 and again.figures().bytes == first.bytes
    again.close([])
    smaller = tier(tmp_path, first.bytes - 1)   # room for one of the two
    assert smaller.figures().entries == 1
    assert len(list(smaller.directory.glob("*.kv"))) == 1
    smaller.close([])


def test_an_entry_larger_than_the_budget_is_not_written(tmp_path):
    kv = kv_caches()[:1]
    size = encode(tier(tmp_path, 0).key, "model", list(range(40)), kv).size
    exact = tier(tmp_path / "exact", size)
    exact.close([("model", list(range(40)), kv)])
    assert exact.figures().writes == 1 and exact.figures().bytes == size
    over = tier(tmp_path / "over", size - 1)
    over.close([("model", list(range(40)), kv)])
    assert over.figures().writes == 0 and not list(over.directory.glob("*.kv"))


def test_a_corrupt_file_is_skipped_with_a_log_line_and_never_loaded(tmp_path, caplog):
    kv = kv_caches()[:1]
    t = tier(tmp_path, 1 << 30)
    t.close([("model", list(range(40)), kv)])
    (path,) = t.directory.glob("*.kv")
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF   # a flipped byte: only the checksum sees it
    path.write_bytes(bytes(data))
    again = tier(tmp_path, 1 << 30)
    found = again.find("model", list(range(41)))
    assert found is not None
    again.load(1, *found)
    loaded: list = []
    wait_for(lambda: loaded.extend(again.finished_loads()) or loaded)
    assert loaded[0].kv is None and loaded[0].reuse == 0
    assert "checksum mismatch" in caplog.text
    assert again.figures().skipped == 1 and again.figures().entries == 0
    assert not path.exists()
    again.close([])


def test_a_write_that_fails_is_counted_and_logged_and_the_tier_goes_on(tmp_path, caplog):
    """A full disk or a directory gone unwritable at run time: a log line, no exception."""
    kv = kv_caches()[:1]
    t = tier(tmp_path, 1 << 30)
    key_file = (t.directory / disk_cache.KEY_FILE).read_bytes()
    for path in t.directory.iterdir():
        path.unlink()
    t.directory.rmdir()
    t.directory.write_bytes(b"")   # the directory is gone: a file stands in its place
    t.evicted("model", list(range(40)), kv)
    wait_for(lambda: t.figures().write_errors == 1)
    assert "cannot write an entry" in caplog.text
    t.directory.unlink()
    t.directory.mkdir()
    (t.directory / disk_cache.KEY_FILE).write_bytes(key_file)
    t.evicted("model", list(range(100, 140)), kv)
    wait_for(lambda: t.figures().writes == 1)
    t.close([])


def test_a_file_is_read_only_when_it_serves_enough_more_than_memory(tmp_path):
    """At least MIN_GAIN_TOKENS more than memory serves, and at least MIN_SHARE of the
    entry: a whole file is not read for the template's first tokens."""
    tokens = list(range(100))
    keys = mx.zeros((1, 2, 100, 64))
    from mlx_lm.models.cache import KVCache

    kv = [KVCache()]
    kv[0].update_and_fetch(keys, keys)
    t = tier(tmp_path, 1 << 30)
    t.close([("model", tokens, kv)])
    again = tier(tmp_path, 1 << 30)
    prompt = tokens + [999]
    gain = disk_cache.MIN_GAIN_TOKENS
    assert again.find("model", prompt, reused=100 - gain)[1] == 100
    assert again.find("model", prompt, reused=100 - gain + 1) is None
    share = int(disk_cache.MIN_SHARE * 100)   # 25 tokens of 100
    assert again.find("model", tokens[:share] + [999, 999])[1] == share
    assert again.find("model", tokens[:share - 1] + [999, 999]) is None
    again.close([])


def test_a_flipped_byte_in_the_header_is_refused_too(tmp_path):
    """The checksum covers the header: tokens changed on disk never serve another prompt."""
    path = written(tmp_path, kv_caches())
    data = path.read_bytes()
    at = data.index(b'"tokens": [0, 1, 2') + len(b'"tokens": [0, 1, ')
    path.write_bytes(data[:at] + b"7" + data[at + 1:])   # token 2 becomes 7
    header, _ = read_header(path, KEY)
    assert header["tokens"][2] == 7
    with pytest.raises(CorruptEntry, match="checksum"):
        read_arrays(path, KEY)
