"""Compressed request bodies: decoded within the body limit, refused clearly otherwise."""

from __future__ import annotations

import gzip
import zlib

import pytest
import zstandard

from triode.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType
from triode.http.body import MAX_BODY_BYTES, decoded

BODY = b'{"model": "m", "input": "' + b"x" * 10_000 + b'"}'


@pytest.mark.parametrize("encoding,encode", [
    ("gzip", gzip.compress), ("x-gzip", gzip.compress), ("deflate", zlib.compress),
    ("zstd", zstandard.compress), ("GZIP", gzip.compress), ("identity", lambda b: b),
    (None, lambda b: b), ("gzip, zstd", lambda b: zstandard.compress(gzip.compress(b))),
])
def test_each_encoding_decodes(encoding, encode):
    assert decoded(encode(BODY), encoding) == BODY


@pytest.mark.parametrize("coding,encode", [("gzip", gzip.compress), ("zstd", zstandard.compress)])
def test_exactly_at_the_limit_is_kept_one_over_is_413(coding, encode):
    """The limit applies to the decoded size: MAX_BODY_BYTES decodes, one byte more is 413,
    however small the compressed body (a 64 MiB bomb is a few KB)."""
    at_limit = b"\0" * MAX_BODY_BYTES
    packed = encode(at_limit)
    assert len(packed) < MAX_BODY_BYTES // 100
    assert len(decoded(packed, coding)) == MAX_BODY_BYTES
    with pytest.raises(PayloadTooLarge) as exc:
        decoded(encode(at_limit + b"\0"), coding)
    assert exc.value.status == 413


@pytest.mark.parametrize("coding,encode", [("gzip", gzip.compress), ("zstd", zstandard.compress)])
def test_truncated_or_garbage_bodies_are_400(coding, encode):
    packed = encode(BODY)
    for raw in (packed[:-6], packed[:12], b"not compressed at all"):
        with pytest.raises(InvalidRequest) as exc:
            decoded(raw, coding)
        assert exc.value.status == 400 and coding in exc.value.message


def test_an_unknown_encoding_is_415():
    with pytest.raises(UnsupportedMediaType) as exc:
        decoded(BODY, "br")
    assert exc.value.status == 415 and "'br'" in exc.value.message


def test_an_empty_compressed_body_decodes_to_nothing():
    assert decoded(gzip.compress(b""), "gzip") == b""
    assert decoded(zstandard.compress(b""), "zstd") == b""
