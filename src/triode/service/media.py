"""A request's media made ready while it is prepared: files become text, images are
checked (and fetched from hosts `--media-fetch` allows).

`Media.resolve` walks the input's content parts (messages, and the outputs of function and
custom tool calls) and returns the items with every `input_file` replaced by an
`input_text` part holding the file's text (so it is counted, stored and replayed as the
user's content) and every `input_image` by one whose `image_url` is a data URL of the image's
bytes. Decoding and fetching run in worker threads that poll for cancellation between
steps (pages, network reads), so a client that disconnects stops them
(docs/media.md). Each refusal is a 400 naming the field.
"""

from __future__ import annotations

import base64
import copy
import http.client
import ipaddress
import socket
import ssl
import time
from typing import Callable, TypeVar
from urllib.parse import urljoin, urlsplit

import attrs
import trio

from ..errors import InvalidRequest
from ..model import decoding as media
from ..model.decoding import Blob, MediaError
from ..responses.wire import (ContentPart, CustomToolCallOutput, FunctionCallOutput,
                              InputFile, InputImage, InputItem, InputText, Message)

T = TypeVar("T")

FETCH_TIMEOUT = 10.0        # seconds for one fetch, redirects included
MAX_REDIRECTS = 3
READ_CHUNK = 65536
REDIRECTS = (301, 302, 303, 307, 308)
DETAILS = ("auto", "low", "high", "original")


@attrs.frozen
class FetchRule:
    """`--media-fetch`: the hosts whose http(s) URLs a request may name. An entry is a host
    (`example.com`, `127.0.0.1`, `[::1]`), optionally with a port (`example.com:8443`), a
    `*.example.com` wildcard (its subdomains) or `*` (every host). A host reached through a
    wildcard must resolve to public addresses only; an exact entry is the operator's word
    for that host, so it may be private or loopback."""

    entries: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: str | None) -> FetchRule:
        if not value:
            return cls()
        return cls(tuple(e.strip().lower() for e in value.split(",") if e.strip()))

    def match(self, host: str, port: int) -> str | None:
        """"exact", "wildcard" or None (not allowed)."""
        host = host.lower().rstrip(".")
        shown = f"[{host}]" if ":" in host else host
        found = None
        for entry in self.entries:
            if entry in (shown, f"{shown}:{port}"):
                return "exact"
            if entry == "*" or (entry.startswith("*.") and host.endswith(entry[1:])):
                found = "wildcard"
        return found


@attrs.frozen
class MediaLimits:
    fetch: FetchRule = FetchRule()
    max_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 7680 * 4320
    fetch_timeout: float = FETCH_TIMEOUT


def _check_cancelled() -> None:
    trio.from_thread.check_cancelled()


class Media:
    """Resolves the media of a request's input for one loaded model."""

    def __init__(self, limits: MediaLimits = MediaLimits(), *, vision: bool = False):
        self.limits = limits
        self.vision = vision
        # Decoding is CPU work: two at a time, beside the renders' own limiter.
        self._limiter = trio.CapacityLimiter(2)

    def for_model(self, *, vision: bool) -> Media:
        """The same reader (its limits and its limiter) for a model that does or does not
        take images."""
        if vision == self.vision:
            return self
        other = copy.copy(self)
        other.vision = vision
        return other

    async def resolve(self, given: list[InputItem]) -> list[InputItem]:
        """The items with their media made ready (the same list when there is none)."""
        if not any(self._has_media(item) for item in given):
            return given
        out: list[InputItem] = []
        for i, item in enumerate(given):
            match item:
                case Message(content=list() as parts):
                    out.append(attrs.evolve(item, content=await self._parts(
                        parts, f"input[{i}].content")))
                case FunctionCallOutput(output=list() as parts) | \
                        CustomToolCallOutput(output=list() as parts):
                    out.append(attrs.evolve(item, output=await self._parts(
                        parts, f"input[{i}].output")))
                case _:
                    out.append(item)
        return out

    @staticmethod
    def _has_media(item: InputItem) -> bool:
        match item:
            case Message(content=list() as parts) | FunctionCallOutput(output=list() as parts) \
                    | CustomToolCallOutput(output=list() as parts):
                return any(isinstance(p, (InputImage, InputFile)) for p in parts)
        return False

    async def _parts(self, parts: list[ContentPart], where: str) -> list[ContentPart]:
        out: list[ContentPart] = []
        for j, part in enumerate(parts):
            param = f"{where}[{j}]"
            if isinstance(part, InputImage):
                out.append(await self._image(part, param))
            elif isinstance(part, InputFile):
                out.append(await self._file(part, param))
            else:
                out.append(part)
        return out

    async def _image(self, part: InputImage, param: str) -> InputImage:
        if not self.vision:
            raise InvalidRequest("this model does not take image input (it is a text-only "
                                 "model; serve a vision model that mlx-vlm loads)",
                                 param=param)
        if part.detail is not None and part.detail not in DETAILS:
            raise InvalidRequest(f"detail must be one of {', '.join(DETAILS)} (got "
                                 f"{part.detail!r})", param=f"{param}.detail")
        if part.file_id is not None:
            raise _no_files(f"{param}.file_id", "image_url")
        if part.image_url is None:
            raise InvalidRequest("an input_image needs image_url (a data URL, or an http(s) "
                                 "URL of a host --media-fetch allows)",
                                 param=f"{param}.image_url")
        where = f"{param}.image_url"
        url = part.image_url
        limits = self.limits

        def decode() -> str:
            blob = self._blob_of_url(url, where)
            image = media.decode_image(blob, limits.max_pixels)
            return url if media.is_data_url(url) else _data_url(Blob(blob.data, image.mime))

        return attrs.evolve(part, image_url=await self._run(decode, where))

    async def _file(self, part: InputFile, param: str) -> InputText:
        if part.file_id is not None:
            raise _no_files(f"{param}.file_id", "file_data")
        given = [name for name in ("file_data", "file_url") if getattr(part, name) is not None]
        if len(given) != 1:
            raise InvalidRequest("an input_file needs exactly one of file_data (base64 or a "
                                 "data URL, with filename) and file_url",
                                 param=f"{param}.{given[1] if given else 'file_data'}")
        where = f"{param}.{given[0]}"
        filename = part.filename
        limits = self.limits

        def extract() -> tuple[str | None, str]:
            if part.file_url is not None:
                name = filename
                if name is None and not media.is_data_url(part.file_url):
                    name = urlsplit(part.file_url).path.rsplit("/", 1)[-1] or None
                return name, media.text_of_file(self._blob_of_url(part.file_url, where), name,
                                                check=_check_cancelled)
            data = part.file_data or ""
            blob = media.parse_data_url(data, limits.max_bytes) if media.is_data_url(data) \
                else Blob(media.decode_base64(data, limits.max_bytes))
            return filename, media.text_of_file(blob, filename, check=_check_cancelled)

        name, text = await self._run(extract, where)
        return InputText(text=media.rendered_file(name, text))

    def _blob_of_url(self, url: str, where: str) -> Blob:
        """A data URL's bytes, or a fetch's (worker thread)."""
        if media.is_data_url(url):
            return media.parse_data_url(url, self.limits.max_bytes)
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise MediaError("the URL must be a data URL or an http(s) URL"
                             + (f" (got a {scheme}: URL)" if scheme else ""))
        return fetch(url, self.limits, check=_check_cancelled)

    async def _run(self, fn: Callable[[], T], where: str) -> T:
        """`fn` in a worker thread that stops at its next check when this task is
        cancelled; a MediaError becomes the 400 naming `where`."""
        try:
            return await trio.to_thread.run_sync(fn, limiter=self._limiter)
        except MediaError as exc:
            raise InvalidRequest(exc.reason, param=where) from None


def _no_files(param: str, instead: str) -> InvalidRequest:
    return InvalidRequest(f"file_id is not supported: this server has no Files API; send "
                          f"the content in {instead} instead", param=param)


def _data_url(blob: Blob) -> str:
    return f"data:{blob.mime};base64,{base64.b64encode(blob.data).decode()}"


# ---- fetching ---------------------------------------------------------------------------

class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to an address resolved (and checked) beforehand, verifying the host's name."""

    def __init__(self, host: str, address: str, port: int, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


def _address(host: str, port: int, how: str) -> str:
    """The address to connect to: the first the host resolves to (`checked_addresses`)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise MediaError(f"cannot resolve {host}: {exc}") from None
    return checked_addresses(host, [str(info[4][0]) for info in infos], how)[0]


def checked_addresses(host: str, addresses: list[str], how: str, *,
                      flag: str = "--media-fetch") -> list[str]:
    """The addresses `host` resolved to, if it may be reached at them: a host allowed only
    by a wildcard (`how` is not "exact") must resolve to public addresses alone (no
    loopback, private, link-local, reserved or multicast address, however the name was
    reached). A MediaError names the first that is not."""
    if how != "exact":
        for address in addresses:
            if not ipaddress.ip_address(address.split("%")[0]).is_global:
                raise MediaError(f"{host} resolves to {address}, a private address; only a "
                                 f"host {flag} names exactly may be private")
    if not addresses:
        raise MediaError(f"cannot resolve {host}")
    return addresses


def fetch(url: str, limits: MediaLimits, *, check: Callable[[], None]) -> Blob:
    """GET `url` under `--media-fetch`: every hop (at most MAX_REDIRECTS redirects) is
    checked against the allowed hosts and addresses, the whole fetch takes at most
    `limits.fetch_timeout` seconds and `limits.max_bytes` bytes."""
    deadline = time.monotonic() + limits.fetch_timeout
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise MediaError(f"a redirect led to a {scheme}: URL; only http(s) is fetched")
        host = parts.hostname
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise MediaError("the URL's port is invalid") from None
        if not host:
            raise MediaError("the URL has no host")
        how = limits.fetch.match(host, port)
        if how is None:
            raise MediaError(f"fetching from {host} is not allowed: this server fetches "
                             "media only from the hosts --media-fetch names"
                             if limits.fetch.entries else
                             "fetching media by URL is off on this server (--media-fetch "
                             "names the hosts it may fetch from); send a data URL")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise MediaError(f"fetching took more than {limits.fetch_timeout:g} s")
        check()
        kind = _PinnedHTTPS if scheme == "https" else _PinnedHTTP
        conn = kind(host, _address(host, port, how), port, remaining)
        try:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request("GET", target, headers={"User-Agent": "triode", "Accept": "*/*",
                                                 "Accept-Encoding": "identity"})
            resp = conn.getresponse()
            if resp.status in REDIRECTS and resp.getheader("Location"):
                url = urljoin(url, resp.getheader("Location", ""))
                continue
            if resp.status != 200:
                raise MediaError(f"fetching {url} answered HTTP {resp.status}")
            length = resp.getheader("Content-Length")
            if length is not None and length.isdigit() and int(length) > limits.max_bytes:
                raise MediaError(f"the file at {url} is {length} bytes, larger than the "
                                 f"{limits.max_bytes}-byte limit for media")
            data = bytearray()
            while chunk := resp.read(READ_CHUNK):
                data += chunk
                if len(data) > limits.max_bytes:
                    raise MediaError(f"the file at {url} is larger than the "
                                     f"{limits.max_bytes}-byte limit for media")
                if time.monotonic() > deadline:
                    raise MediaError(f"fetching took more than {limits.fetch_timeout:g} s")
                check()
            mime = resp.getheader("Content-Type")
            return Blob(bytes(data), mime.split(";")[0].strip().lower() if mime else None)
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, TimeoutError):
                raise MediaError(f"fetching took more than {limits.fetch_timeout:g} s") \
                    from None
            raise MediaError(f"fetching {url} failed: {type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
    raise MediaError(f"more than {MAX_REDIRECTS} redirects")
