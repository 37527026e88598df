"""model/decoding.py's decoders without a server: a PDF's pages, and what kind of file a blob
is."""

from __future__ import annotations

import pytest

from triode.model import decoding as media
from triode.model.decoding import Blob, MediaError

from ..fixtures.media import text_pdf


def test_pdf_pages_are_limited_and_read_in_order():
    """Text from every page in order; a PDF with more pages than the limit is refused."""
    pdf = text_pdf(["one", "two", "three"])
    assert media.pdf_text(pdf) == "one\n\ntwo\n\nthree"
    assert media.pdf_text(pdf, max_pages=3) == "one\n\ntwo\n\nthree"
    with pytest.raises(MediaError, match="3 pages; the limit is 2"):
        media.pdf_text(pdf, max_pages=2)


def test_text_types_are_told_from_type_name_and_bytes():
    """Declared text types, known suffixes and undeclared UTF-8 are text; PDF by type, name
    or magic; other binary types are refused."""
    assert media.file_kind(Blob(b"a,b", "text/csv"), None) == "text"
    assert media.file_kind(Blob(b"x = 1"), "main.py") == "text"
    assert media.file_kind(Blob(b"plain words"), None) == "text"
    assert media.file_kind(Blob(text_pdf(["x"])), None) == "pdf"
    with pytest.raises(MediaError, match="unsupported file type"):
        media.file_kind(Blob(b"\x00\x01\x02", "application/octet-stream"), "a.bin")
