"""Media as the model takes it: images decoded and checked, files made into text.

Pure, blocking functions (Pillow, pypdf): the turn service runs them in worker threads while
a request is prepared (service/media.py), passing `check`, which raises when the request was
cancelled, so a long PDF stops between pages. Every refusal is a `MediaError` whose reason
the caller puts in a 400 naming the field.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import re
from pathlib import PurePosixPath
from typing import Any, Callable

import attrs

# Image formats a request may send (the first frame of a GIF), by Pillow's format name.
IMAGE_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp",
                 "GIF": "image/gif"}
PDF_MAX_PAGES = 500
# What `detail` asks of the processor: the most pixels an image is resized to (`auto`: the
# processor's own limit). Low is OpenAI's 512 x 512; high leaves the processor's maximum.
DETAIL_PIXELS = {"low": 512 * 512, "high": None, "auto": None}

TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-yaml",
              "application/yaml", "application/toml", "application/javascript",
              "application/x-sh", "application/sql", "application/csv",
              "application/x-python", "application/x-ndjson")
TEXT_SUFFIXES = frozenset(
    ".txt .text .md .markdown .rst .csv .tsv .json .jsonl .ndjson .xml .yaml .yml .toml .ini "
    ".cfg .conf .log .html .htm .css .js .mjs .ts .tsx .jsx .py .pyi .rb .go .rs .java .kt "
    ".c .h .cc .cpp .hpp .cs .swift .m .php .pl .sh .bash .zsh .sql .r .lua .scala .hs .ex "
    ".exs .erl .clj .dart .vue .svelte .tex .diff .patch .proto .graphql .env .dockerfile "
    ".makefile .gitignore".split())

Check = Callable[[], None]


class MediaError(Exception):
    """Media a request cannot use; `reason` says why, the caller names the field."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _nothing() -> None:
    return None


@attrs.frozen
class Blob:
    """Bytes as a request sent or a fetch returned them, with their declared type."""

    data: bytes
    mime: str | None = None        # lowercase, without parameters


def _mime(declared: str) -> str | None:
    kind = declared.split(";", 1)[0].strip().lower()
    return kind or None


def decode_base64(text: str, max_bytes: int) -> bytes:
    """Standard or URL-safe base64, whitespace allowed; MediaError if it is not base64 or
    decodes to more than `max_bytes`."""
    compact = re.sub(r"\s+", "", text)
    if len(compact) // 4 * 3 > max_bytes + 3:
        raise MediaError(f"larger than the {max_bytes}-byte limit for media")
    if "-" in compact or "_" in compact:
        compact = compact.replace("-", "+").replace("_", "/")
    compact += "=" * (-len(compact) % 4)
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("not valid base64") from None
    if len(data) > max_bytes:
        raise MediaError(f"larger than the {max_bytes}-byte limit for media")
    return data


def parse_data_url(url: str, max_bytes: int) -> Blob:
    """A `data:` URL (RFC 2397): base64 or percent-encoded text."""
    from urllib.parse import unquote_to_bytes

    if not url[:5].lower() == "data:" or "," not in url:
        raise MediaError("not a data URL (data:<type>;base64,<data>)")
    header, _, payload = url[5:].partition(",")
    params = header.split(";")
    mime = _mime(params[0]) if params[0] else "text/plain"
    if any(p.strip().lower() == "base64" for p in params[1:]):
        return Blob(decode_base64(payload, max_bytes), mime)
    data = unquote_to_bytes(payload)
    if len(data) > max_bytes:
        raise MediaError(f"larger than the {max_bytes}-byte limit for media")
    return Blob(data, mime)


def is_data_url(url: str) -> bool:
    return url[:5].lower() == "data:"


# ---- images -----------------------------------------------------------------------------

@attrs.frozen
class Image:
    """A decoded image: RGB pixels (a Pillow image, first frame), its source format, size
    and a digest of its pixels (what the prompt cache keys it by)."""

    pixels: Any = attrs.field(eq=False, repr=False)
    mime: str
    width: int
    height: int
    digest: str


def decode_image(blob: Blob, max_pixels: int) -> Image:
    """Decodes PNG, JPEG, WebP or GIF (its first frame) to RGB. The pixel count is checked
    from the header before any pixel is decoded, so a decompression bomb costs nothing."""
    from PIL import Image as PILImage, UnidentifiedImageError

    if not blob.data:
        raise MediaError("the image is empty")
    # The limit is ours (checked below, before decoding); Pillow's own would refuse a
    # larger --media-max-pixels with a message naming neither the size nor the flag.
    PILImage.MAX_IMAGE_PIXELS = None
    try:
        with PILImage.open(io.BytesIO(blob.data), formats=list(IMAGE_FORMATS)) as img:
            width, height = img.size
            if width * height > max_pixels:
                raise MediaError(f"the image is {width}x{height}, {width * height} pixels; "
                                 f"the limit is {max_pixels}")
            mime = IMAGE_FORMATS[str(img.format)]
            img.seek(0)
            rgb = img.convert("RGB")
            rgb.load()
    except MediaError:
        raise
    except UnidentifiedImageError:
        kinds = ", ".join(IMAGE_FORMATS.values())
        declared = f" (declared {blob.mime})" if blob.mime else ""
        raise MediaError(f"not an image of a supported type{declared}; supported: "
                         f"{kinds}") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise MediaError(f"the image data is corrupt ({exc})") from None
    digest = hashlib.sha256(rgb.tobytes() + f"{width}x{height}".encode()).hexdigest()
    return Image(rgb, mime, width, height, digest)


# ---- files ------------------------------------------------------------------------------

def file_kind(blob: Blob, filename: str | None) -> str:
    """"pdf" or "text", from the declared type, the file name and the bytes; MediaError for
    any other type."""
    suffix = PurePosixPath(filename or "").suffix.lower()
    mime = blob.mime
    if mime == "application/pdf" or suffix == ".pdf" or blob.data[:5] == b"%PDF-":
        return "pdf"
    if mime is not None and mime.startswith(TEXT_TYPES) or suffix in TEXT_SUFFIXES or \
            (mime in (None, "application/octet-stream") and _looks_textual(blob.data)):
        return "text"
    what = mime or (suffix and f"'{suffix}' files") or "this file"
    raise MediaError(f"unsupported file type {what}: files may be text (plain, Markdown, "
                     "CSV, JSON, source code) or PDF")


def _looks_textual(data: bytes) -> bool:
    if b"\x00" in data[:8192]:
        return False
    try:
        data[:8192].decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= 8188   # a character cut at the sample's end
    return True


def text_of_file(blob: Blob, filename: str | None, *, check: Check = _nothing) -> str:
    """A file's text: UTF-8 (a BOM dropped) for text types, the extracted text of a PDF."""
    if file_kind(blob, filename) == "pdf":
        return pdf_text(blob.data, check=check)
    data = blob.data[3:] if blob.data.startswith(b"\xef\xbb\xbf") else blob.data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MediaError(f"the file is not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise MediaError("the file is not text (it contains NUL bytes)")
    if (blob.mime == "application/json" or
            PurePosixPath(filename or "").suffix.lower() == ".json"):
        try:
            json.loads(text)
        except ValueError as exc:
            raise MediaError(f"the file is not valid JSON ({exc})") from None
    return text


# An indirect object's header, `12 0 obj`, where it starts a token.
_OBJECT = re.compile(rb"(?<![0-9])(\d{1,10})[ \t\r\n\f]+(\d{1,5})[ \t\r\n\f]+obj\b")
_ROOT = re.compile(rb"/Root[ \t\r\n\f]+(\d{1,10})[ \t\r\n\f]+(\d{1,5})[ \t\r\n\f]+R\b")
_CATALOG = re.compile(rb"/Type[ \t\r\n\f]*/Catalog\b")


def rebuilt_xref(data: bytes) -> bytes | None:
    """`data` with a cross-reference table rebuilt from its objects, as forgiving readers
    do for a file whose table (or `startxref`) is missing or wrong: every `N G obj` found,
    the last of each number winning (an incremental update's); the root is the trailer's
    `/Root`, else the object that declares itself the `/Catalog`. None when there are no
    objects or no root to find: the file is not a PDF that can be read."""
    objects: dict[int, tuple[int, int]] = {}
    for found in _OBJECT.finditer(data):
        objects[int(found.group(1))] = (int(found.group(2)), found.start())
    roots = list(_ROOT.finditer(data))
    root = (int(roots[-1].group(1)), int(roots[-1].group(2))) if roots else None
    if root is None or root[0] not in objects:
        catalogs = [n for n, (_, start) in objects.items()
                    if _CATALOG.search(data, start, _object_end(data, start))]
        root = (catalogs[-1], objects[catalogs[-1]][0]) if catalogs else None
    if root is None or not objects:
        return None
    size = max(objects) + 1
    body = data if data.endswith((b"\n", b"\r")) else data + b"\n"
    table = [b"xref\n0 %d\n" % size]
    for n in range(size):
        gen, start = objects.get(n, (65535 if n == 0 else 0, 0))
        table.append(b"%010d %05d %s \n" % (start, gen, b"n" if n in objects else b"f"))
    table.append(b"trailer\n<< /Size %d /Root %d %d R >>\nstartxref\n%d\n%%%%EOF\n"
                 % (size, root[0], root[1], len(body)))
    return body + b"".join(table)


def _object_end(data: bytes, start: int) -> int:
    end = data.find(b"endobj", start)
    return end if end >= 0 else len(data)


def pdf_text(data: bytes, *, check: Check = _nothing, max_pages: int = PDF_MAX_PAGES) -> str:
    """The text of every page (pypdf's extraction), pages separated by blank lines; `check`
    runs between pages. Encrypted PDFs are read when their user password is empty. A file
    pypdf cannot open is read once more with its cross-reference table rebuilt
    (`rebuilt_xref`); what still cannot be read, or yields no text at all that way (a file
    cut short: its objects, but not its pages' text), is a MediaError ("the PDF is
    corrupt")."""
    from pypdf.errors import PdfReadError, PdfStreamError

    try:
        return _pdf_text(data, check, max_pages)
    except MediaError as first:
        if first.__cause__ is None or not isinstance(first.__cause__, (PdfReadError,
                                                                         PdfStreamError)):
            raise
        rebuilt = rebuilt_xref(data)
        if rebuilt is None:
            raise first from None
        try:
            text = _pdf_text(rebuilt, check, max_pages)
        except MediaError:
            raise first from None
        if not text:   # objects found, but nothing of the document: a truncated upload
            raise first from None
        return text


def _pdf_text(data: bytes, check: Check, max_pages: int) -> str:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError, PdfStreamError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise MediaError("the PDF is encrypted with a password")
        pages = len(reader.pages)
        if pages > max_pages:
            raise MediaError(f"the PDF has {pages} pages; the limit is {max_pages}")
        texts = []
        for page in reader.pages:
            check()
            texts.append(page.extract_text().strip())
    except MediaError:
        raise
    except FileNotDecryptedError:
        raise MediaError("the PDF is encrypted with a password") from None
    except (PdfReadError, PdfStreamError, ValueError, KeyError, TypeError, OSError,
            AttributeError, IndexError, RecursionError) as exc:
        error = MediaError(f"the PDF is corrupt ({type(exc).__name__}: {exc})")
        error.__cause__ = exc   # pdf_text tries a rebuilt table for pypdf's own errors
        raise error
    return "\n\n".join(t for t in texts if t)


def rendered_file(filename: str | None, text: str) -> str:
    """How a file's text is shown to the model: inside the user's content, named."""
    name = filename or "file"
    return f"<file name={json.dumps(name, ensure_ascii=False)}>\n{text}\n</file>"
