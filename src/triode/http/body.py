"""Request bodies and query strings: JSON within the limits, and the JSON responses."""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

import zstandard
from quart import Response, request

from ..responses.objects import dumps
from ..errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType

# Bytes a request body may have; one more is a 413.
MAX_BODY_BYTES = 64 * 1024 * 1024

# Nesting levels a request body may have (the body itself is level 1). Far more than any
# real request or JSON schema needs, and far below where parsing, structuring or a template
# would run out of stack.
MAX_JSON_DEPTH = 64


def decoded(raw: bytes, encoding: str | None) -> bytes:
    """The body without its `Content-Encoding` (gzip, deflate or zstd), never more than
    MAX_BODY_BYTES once decoded: a 413 past that, however small the compressed body (no zip
    bombs: decoding stops one byte past the limit)."""
    codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip()]
    for coding in reversed(codings):   # the last one listed was applied last
        if coding == "identity":
            continue
        try:
            if coding in ("gzip", "x-gzip", "deflate"):
                # wbits 32 + MAX_WBITS: a gzip or a zlib header, detected
                inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)
                out = inflater.decompress(raw, MAX_BODY_BYTES + 1)
                complete = inflater.eof
            elif coding == "zstd":
                out, complete = _unzstd(raw)
            else:
                raise UnsupportedMediaType(
                    f"Content-Encoding '{coding}' is not supported; use gzip, deflate, zstd "
                    "or none")
        except (zlib.error, zstandard.ZstdError) as exc:
            raise InvalidRequest(f"the request body is not valid {coding} ({exc})") from None
        if len(out) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"the decoded request body is larger than {MAX_BODY_BYTES} "
                                  "bytes")
        if not complete:
            raise InvalidRequest(f"the request body is not valid {coding} (truncated)")
        raw = out
    return raw


# zstd input is fed this many bytes at a time, so a bomb overshoots the limit by at most a
# few MB of output before decoding stops (a 128 KiB block can take ~3 bytes).
ZSTD_FEED_BYTES = 256


def _unzstd(raw: bytes) -> tuple[bytes, bool]:
    """(the decoded bytes, up to one past MAX_BODY_BYTES; whether the frame was complete)."""
    inflater = zstandard.ZstdDecompressor().decompressobj()
    out = bytearray()
    for start in range(0, len(raw), ZSTD_FEED_BYTES):
        out += inflater.decompress(raw[start:start + ZSTD_FEED_BYTES])
        if len(out) > MAX_BODY_BYTES or inflater.eof:
            break
    return bytes(out[:MAX_BODY_BYTES + 1]), inflater.eof


async def json_body() -> Any:
    sent = await request.get_data(cache=True, as_text=False, parse_form_data=False)
    raw = decoded(sent, request.headers.get("Content-Encoding"))
    try:
        body = json.loads(raw)
    except RecursionError:
        raise InvalidRequest(f"the JSON body is nested more than {MAX_JSON_DEPTH} levels "
                             "deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request ({exc}). The body must be "
            "valid JSON with Content-Type: application/json.") from None
    check_body(body)
    return body


_SURROGATE = re.compile("[\ud800-\udfff]")   # JSON can escape one alone; UTF-8 cannot hold it


def check_body(body: Any) -> None:
    """A 400 naming the top-level field whose value nests deeper than MAX_JSON_DEPTH or
    holds a string (or key) with an unpaired UTF-16 surrogate, which no later step could
    encode."""
    stack: list[tuple[Any, int, str | None]] = [(body, 1, None)]
    while stack:
        value, depth, field = stack.pop()
        if isinstance(value, str):
            if (bad := _SURROGATE.search(value)) is not None:
                raise InvalidRequest(
                    f"the JSON body has a string with an unpaired surrogate "
                    f"(\\u{ord(bad.group()):04x}), which is not valid Unicode", param=field)
            continue
        if isinstance(value, dict):   # keys are strings to check too
            children = [(x, k if field is None else field)
                        for k, v in value.items() for x in (k, v)]
        elif isinstance(value, list):
            children = [(v, field) for v in value]
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise InvalidRequest(f"the JSON body is nested more than {MAX_JSON_DEPTH} levels "
                                 "deep", param=field)
        stack += [(v, depth + 1, f) for v, f in children]


def json_response(obj: Any, status: int = 200) -> Response:
    """`obj`: a typed answer (responses/objects.py) or JSON-shaped data."""
    return Response(dumps(obj), status=status, content_type="application/json")


def query_int(name: str, default: int, *, lo: int, hi: int | None = None) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"Invalid value for '{name}': expected an integer",
                             param=name) from None
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise InvalidRequest(f"Invalid value for '{name}': must be {bound}", param=name)
    return value
