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


# ---- malformed PDFs that forgiving readers open (issue 43) ---------------------------------

def without_table(pdf: bytes) -> bytes:
    """The file as if its writer stopped before the cross-reference table: no `xref`, no
    trailer, no `startxref`, no `%%EOF`."""
    return pdf[:pdf.index(b"xref")]


def test_a_pdf_without_its_xref_table_and_startxref_is_read():
    pdf = without_table(text_pdf(["Quarterly report", "Second page"]))
    assert b"startxref" not in pdf
    assert media.pdf_text(pdf) == "Quarterly report\n\nSecond page"


def test_a_pdf_whose_trailer_is_left_but_startxref_is_gone_is_read():
    pdf = text_pdf(["Trailer kept"])
    pdf = pdf[:pdf.index(b"startxref")]
    assert media.pdf_text(pdf) == "Trailer kept"


def test_a_compact_pdf_without_a_table_finds_its_catalog():
    """Objects written without whitespace and no trailer at all: the root is the object that
    declares itself the catalog."""
    stream = b"BT /F1 12 Tf 72 720 Td (Compact) Tj ET"
    pdf = (b"%%PDF-1.1\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
           b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
           b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Resources<</Font<</F1 "
           b"5 0 R>>>>/Contents 4 0 R>>endobj\n"
           b"4 0 obj<</Length %d>>stream\n%s\nendstream endobj\n"
           b"5 0 obj<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>endobj\n"
           % (len(stream), stream))
    assert media.pdf_text(pdf) == "Compact"


def test_the_last_copy_of_an_object_wins_as_in_an_incremental_update():
    pdf = without_table(text_pdf(["Old text"]))
    stream = b"BT /F1 12 Tf 72 720 Td (New text) Tj ET"
    pdf += b"5 0 obj\n<< /Length %d >>\nstream\n%s\nendstream\nendobj\n" % (len(stream), stream)
    assert media.pdf_text(pdf) == "New text"


@pytest.mark.parametrize("data", [
    b"%PDF-1.4\nthis is not a PDF at all",
    b"%PDF-1.4\n1 0 obj << /Type /Kitten >> endobj\n",   # objects, but nothing to root them
    without_table(text_pdf(["x"])).replace(b"/Type /Catalog", b"/Type /Kitten"),
    text_pdf(["cut short"])[:300],   # an upload cut in half: objects, but no page's text
])
def test_what_no_table_can_rescue_is_still_a_400(data):
    with pytest.raises(MediaError, match="the PDF is corrupt"):
        media.pdf_text(data)


def test_a_rebuilt_table_points_at_every_object():
    pdf = without_table(text_pdf(["a", "b"]))
    rebuilt = media.rebuilt_xref(pdf)
    assert rebuilt is not None and rebuilt.startswith(pdf)
    table = rebuilt[len(pdf):].split(b"\n")
    assert table[0] == b"xref" and table[1] == b"0 8"
    entries = table[2:10]
    assert entries[0] == b"0000000000 65535 f "
    for n, entry in enumerate(entries[1:], 1):
        offset = int(entry[:10])
        assert pdf[offset:].startswith(b"%d 0 obj" % n) and entry.endswith(b" n ")
    assert media.rebuilt_xref(b"%PDF-1.4\nno objects") is None
