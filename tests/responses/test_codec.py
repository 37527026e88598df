"""The base64url-JSON codec of `encrypted_content` blobs: compact, unpadded, URL-safe, and a
ValueError for anything it did not make."""

from __future__ import annotations

import base64
import json

import pytest

from triode.responses import codec


def test_a_value_reads_back_as_it_was_written():
    """`decode(encode(v)) == v`, non-ASCII text and nesting included."""
    value = {"summary": "résumé ✓", "items": [{"role": "user", "n": 1}], "none": None}
    assert codec.decode(codec.encode(value)) == value


def test_a_blob_is_url_safe_unpadded_compact_json():
    """No `+`, `/` or `=` in a blob (it travels in URLs and JSON as is), and the JSON inside
    has no spaces and keeps UTF-8 as UTF-8."""
    for n in range(6):   # every padding length
        blob = codec.encode({"k": "?>" * n + "é"})
        assert not set(blob) & set("+/=")
    raw = base64.urlsafe_b64decode(codec.encode({"a": [1, 2], "b": "é"}) + "==")
    assert raw == '{"a":[1,2],"b":"é"}'.encode()


@pytest.mark.parametrize("text", [
    "not base64 at all!",                                          # not base64url
    base64.urlsafe_b64encode(b"plain text").decode().rstrip("="),  # not JSON
    base64.urlsafe_b64encode(b"\xff\xfe").decode().rstrip("="),    # not UTF-8
])
def test_anything_the_codec_did_not_make_is_a_value_error(text):
    """A client's blob that is not base64url JSON raises ValueError (callers turn it into a
    400), never another exception."""
    with pytest.raises(ValueError):
        codec.decode(text)


def test_decode_reads_a_padded_blob_too():
    """A blob whose padding a client kept still decodes."""
    padded = base64.urlsafe_b64encode(json.dumps([12]).encode()).decode()
    assert padded.endswith("=")
    assert codec.decode(padded) == [12]
