"""The media step of preparing a turn (service/media.py) without a server: images for a
vision model, decoding limits at their edges, the fetch rule's address guard and deadline,
and cancellation of a decode in progress."""

from __future__ import annotations

import base64
import http.server
import socket
import threading
import time

import attrs
import pytest
import trio

from triode.errors import InvalidRequest
from triode.model import decoding as media
from triode.model.decoding import MediaError
from triode.responses.convert import structure
from triode.responses.items import chat_messages, input_items, message_images
from triode.responses.wire import CreateResponse
from triode.service.media import FetchRule, Media, MediaLimits, fetch

from ..fixtures.media import data_url, image_bytes, png_header_claiming, text_pdf


def wire(content: list[dict]) -> list:
    return structure({"model": "m", "input": [{"role": "user", "content": content}]},
                     CreateResponse).input


async def refused(m: Media, content: list[dict]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as exc:
        await m.resolve(wire(content))
    return exc.value


@pytest.mark.parametrize("fmt, mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"),
                                       ("WEBP", "image/webp"), ("GIF", "image/gif")])
async def test_a_vision_model_takes_each_image_format(fmt, mime):
    """PNG, JPEG, WebP and GIF data URLs pass and reach the template as image parts, in
    order, with the text around them."""
    url = data_url(image_bytes(8, 8, fmt), mime)
    given = wire([{"type": "input_text", "text": "look: "},
                  {"type": "input_image", "image_url": url, "detail": "low"}])
    resolved = await Media(vision=True).resolve(given)
    req = structure({"model": "m", "input": []}, CreateResponse)
    messages = chat_messages(None, input_items(attrs.evolve(req, input=resolved)))
    assert messages[0]["content"][0] == {"type": "text", "text": "look: "}
    [image] = message_images(messages)
    assert image["image_url"] == url and image["detail"] == "low"


async def test_the_pixel_limit_is_exact():
    """An image of exactly --media-max-pixels passes; one pixel more is refused from its
    header, before decoding (a 100000 x 100000 bomb costs nothing)."""
    limits = MediaLimits(max_pixels=64)
    m = Media(limits, vision=True)
    ok = data_url(image_bytes(8, 8), "image/png")
    await m.resolve(wire([{"type": "input_image", "image_url": ok}]))
    over = data_url(image_bytes(13, 5), "image/png")
    err = await refused(m, [{"type": "input_image", "image_url": over}])
    assert err.param == "input[0].content[0].image_url" and "65 pixels" in err.message
    bomb = data_url(png_header_claiming(100000, 100000), "image/png")
    err = await refused(Media(vision=True), [{"type": "input_image", "image_url": bomb}])
    assert "100000x100000" in err.message   # decoding it would take 30 GB


@pytest.mark.parametrize("part, param, reason", [
    ({"type": "input_image", "image_url": "data:image/png;base64,AA=="},
     "input[0].content[0].image_url", "not an image"),
    ({"type": "input_image", "image_url": data_url(image_bytes()[:80], "image/png")},
     "input[0].content[0].image_url", "corrupt"),
    ({"type": "input_image", "image_url": data_url(b"BM" + b"\0" * 64, "image/bmp")},
     "input[0].content[0].image_url", "supported"),
    ({"type": "input_image", "image_url": "data:image/png;base64,!!!"},
     "input[0].content[0].image_url", "base64"),
    ({"type": "input_image", "image_url": "data:image/png;base64,"},
     "input[0].content[0].image_url", "empty"),
    ({"type": "input_image", "file_id": "file-1"}, "input[0].content[0].file_id",
     "Files API"),
    ({"type": "input_image"}, "input[0].content[0].image_url", "needs image_url"),
    ({"type": "input_image", "image_url": "https://example.com/a.png"},
     "input[0].content[0].image_url", "--media-fetch"),
    ({"type": "input_image", "image_url": "ftp://example.com/a.png"},
     "input[0].content[0].image_url", "http(s)"),
    ({"type": "input_image", "image_url": data_url(image_bytes(), "image/png"),
      "detail": "huge"}, "input[0].content[0].detail", "detail"),
])
async def test_bad_images_are_400s_naming_the_field(part, param, reason):
    """Each bad image for a vision model: a 400 whose param is the field at fault."""
    err = await refused(Media(vision=True), [part])
    assert err.param == param
    assert reason in err.message


async def test_media_byte_limit_is_exact():
    """Decoded bytes exactly at the limit pass, one over is refused (data URLs)."""
    limits = MediaLimits(max_bytes=10)
    m = Media(limits)
    ok = {"type": "input_file", "filename": "a.txt",
          "file_data": base64.b64encode(b"a" * 10).decode()}
    await m.resolve(wire([ok]))
    over = {"type": "input_file", "filename": "a.txt",
            "file_data": "data:text/plain;base64," + base64.b64encode(b"a" * 11).decode()}
    err = await refused(m, [over])
    assert err.param == "input[0].content[0].file_data" and "10-byte" in err.message


def test_a_wildcard_does_not_reach_private_addresses():
    """Through `*` a loopback host is refused; named exactly, it is fetched."""
    body = b"hello"

    class One(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    host = http.server.ThreadingHTTPServer(("127.0.0.1", 0), One)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{host.server_address[1]}/a.txt"
    try:
        with pytest.raises(MediaError, match="private address"):
            fetch(url, MediaLimits(FetchRule.parse("*")), check=lambda: None)
        with pytest.raises(MediaError, match="private address"):
            fetch(url.replace("127.0.0.1", "localhost"),
                  MediaLimits(FetchRule.parse("*.localhost,localhost.*,*")),
                  check=lambda: None)
        assert fetch(url, MediaLimits(FetchRule.parse("127.0.0.1")),
                     check=lambda: None).data == body
        port = host.server_address[1]
        assert fetch(url, MediaLimits(FetchRule.parse(f"127.0.0.1:{port}")),
                     check=lambda: None).data == body
        with pytest.raises(MediaError, match="not allowed"):
            fetch(url, MediaLimits(FetchRule.parse(f"127.0.0.1:{port + 1}")),
                  check=lambda: None)
    finally:
        host.shutdown()
        host.server_close()


def test_a_fetch_that_stalls_ends_at_its_deadline():
    """A host that accepts and never answers: the fetch ends with a timeout reason."""
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/slow"
    try:
        with pytest.raises(MediaError, match="more than 0.3 s"):
            fetch(url, MediaLimits(FetchRule.parse("127.0.0.1"), fetch_timeout=0.3),
                  check=lambda: None)
    finally:
        listener.close()


async def test_a_cancelled_request_stops_its_pdf_between_pages(monkeypatch):
    """Cancelling the request while a PDF is read stops the worker at its next page."""
    pages_read = []
    started = threading.Event()

    def slow_pdf(data: bytes, *, check, max_pages: int = 500) -> str:
        for page in range(1000):
            started.set()
            check()
            pages_read.append(page)
            time.sleep(0.005)
        return "done"

    monkeypatch.setattr(media, "pdf_text", slow_pdf)
    part = {"type": "input_file", "filename": "a.pdf",
            "file_data": base64.b64encode(text_pdf(["x"])).decode()}
    with trio.move_on_after(0.2) as scope:
        await Media().resolve(wire([part]))
    assert scope.cancelled_caught and started.is_set()
    read = len(pages_read)
    assert read < 1000
    await trio.sleep(0.05)
    assert len(pages_read) == read    # the worker stopped; it is not still reading


def test_https_fetches_verify_the_host_s_certificate(tmp_path, monkeypatch):
    """An https URL is fetched over TLS to the resolved address with the host's name
    verified: a certificate the machine does not trust is refused, with the reason; once
    trusted (SSL_CERT_FILE), the same fetch succeeds."""
    import ssl
    import subprocess

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)

    class One(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    host = http.server.ThreadingHTTPServer(("127.0.0.1", 0), One)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    host.socket = context.wrap_socket(host.socket, server_side=True)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{host.server_address[1]}/a.txt"
        with pytest.raises(MediaError, match="CERTIFICATE_VERIFY_FAILED|certificate verify"):
            fetch(url, MediaLimits(FetchRule.parse("127.0.0.1")), check=lambda: None)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert fetch(url, MediaLimits(FetchRule.parse("127.0.0.1")),
                     check=lambda: None).data == b"ok"
    finally:
        host.shutdown()
        host.server_close()
