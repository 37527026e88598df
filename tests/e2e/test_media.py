"""Files and images in, through a real server on the bundled (text-only) model: a file's text
reaches the model as the user's content, fetched files obey --media-fetch, and every bad
media input is a 400 naming its field."""

from __future__ import annotations

import base64
import http.server
import threading
from typing import Iterator

import httpx
import pytest

from ..conftest import run_server
from ..fixtures.media import data_url, image_bytes, text_pdf

MODEL = "triode-tiny"
MAX_BYTES = 4096
PHRASE = "violet harbor"


class Files(http.server.BaseHTTPRequestHandler):
    """What the local file host serves: paths to (status, type, body, location)."""

    routes: dict[str, tuple[int, str, bytes, str | None]] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        status, kind, body, location = self.routes.get(
            self.path, (404, "text/plain", b"no such file", None))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        if location:
            self.send_header("Location", location)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def files() -> Iterator[str]:
    """A file host on 127.0.0.1 (which the media server allows by name)."""
    host = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    port = host.server_address[1]
    Files.routes = {
        "/doc.pdf": (200, "application/pdf", text_pdf([f"Reply with: {PHRASE}"]), None),
        "/notes.md": (200, "text/markdown", f"Reply with: {PHRASE}".encode(), None),
        "/moved": (302, "text/plain", b"", "/notes.md"),
        "/away": (302, "text/plain", b"", f"http://localhost:{port}/notes.md"),
        "/loop": (302, "text/plain", b"", "/loop"),
        "/big.txt": (200, "text/plain", b"a" * (MAX_BYTES + 1), None),
        "/edge.txt": (200, "text/plain", b"a" * MAX_BYTES, None),
    }
    threading.Thread(target=host.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        host.shutdown()
        host.server_close()


@pytest.fixture(scope="module")
def media_server():
    with run_server("--media-fetch", "127.0.0.1", "--media-max-bytes", str(MAX_BYTES)) as s:
        yield s


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ask(server, *parts: dict, text: str | None = None) -> httpx.Response:
    content = [*parts, *([{"type": "input_text", "text": text}] if text else [])]
    return server.http.post("/v1/responses", json={
        "model": MODEL, "max_output_tokens": 8, "temperature": 0,
        "input": [{"role": "user", "content": content}]})


def output_text(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return "".join(c["text"] for item in r.json()["output"] if item["type"] == "message"
                   for c in item["content"] if c["type"] == "output_text")


def refusal(r: httpx.Response) -> tuple[str, str]:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    return err["param"], err["message"]


def test_a_pdf_s_text_reaches_the_model(media_server):
    """A text PDF sent as a data URL: the model copies the phrase written on its page, and
    input_tokens counts the file's text."""
    pdf = text_pdf([f"Reply with: {PHRASE}"])
    part = {"type": "input_file", "filename": "doc.pdf",
            "file_data": data_url(pdf, "application/pdf")}
    r = ask(media_server, part)
    assert PHRASE in output_text(r)
    plain = media_server.http.post("/v1/responses", json={
        "model": MODEL, "max_output_tokens": 8, "input": "hi"}).json()
    assert r.json()["usage"]["input_tokens"] > plain["usage"]["input_tokens"] + 5
    counted = media_server.http.post("/v1/responses/input_tokens", json={
        "model": MODEL, "input": [{"role": "user", "content": [part]}]})
    assert counted.json()["input_tokens"] == r.json()["usage"]["input_tokens"]


def test_file_data_may_be_bare_base64_with_a_filename(media_server):
    """`file_data` as plain base64: the filename says it is Markdown; the stored input lists
    the file's text as the user's content."""
    part = {"type": "input_file", "filename": "notes.md",
            "file_data": b64(f"Reply with: {PHRASE}".encode())}
    r = ask(media_server, part)
    assert PHRASE in output_text(r)
    items = media_server.http.get(f"/v1/responses/{r.json()['id']}/input_items").json()
    [content] = items["data"][0]["content"]
    assert content["type"] == "input_text" and PHRASE in content["text"]
    assert "notes.md" in content["text"]


def test_a_file_in_a_tool_output_reaches_the_model(media_server):
    """An input_file inside a function_call_output is read like one in a message."""
    r = media_server.http.post("/v1/responses", json={
        "model": MODEL, "max_output_tokens": 8, "temperature": 0, "input": [
            {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": [
                {"type": "input_file", "filename": "doc.pdf",
                 "file_data": data_url(text_pdf([f"Reply with: {PHRASE}"]),
                                       "application/pdf")}]}]})
    assert PHRASE in output_text(r)


def test_a_file_url_of_an_allowed_host_is_fetched(media_server, files):
    """file_url on the allowed host: PDF and Markdown, and through a redirect on the host."""
    for path in ("/doc.pdf", "/notes.md", "/moved"):
        r = ask(media_server, {"type": "input_file", "file_url": files + path})
        assert PHRASE in output_text(r), path


def test_the_byte_limit_is_exact(media_server, files):
    """A file of exactly --media-max-bytes is read; one byte more is a 400, sent or
    fetched; an empty file is read as empty text."""
    assert ask(media_server, {"type": "input_file", "filename": "a.txt",
                              "file_data": b64(b"a" * MAX_BYTES)}).status_code == 200
    param, message = refusal(ask(media_server, {"type": "input_file", "filename": "a.txt",
                                                "file_data": b64(b"a" * (MAX_BYTES + 1))}))
    assert param == "input[0].content[0].file_data" and str(MAX_BYTES) in message
    assert ask(media_server, {"type": "input_file", "file_url": files + "/edge.txt"}
               ).status_code == 200
    param, message = refusal(ask(media_server, {"type": "input_file",
                                                "file_url": files + "/big.txt"}))
    assert param == "input[0].content[0].file_url" and str(MAX_BYTES) in message
    assert ask(media_server, {"type": "input_file", "filename": "a.txt", "file_data": ""},
               text="Reply with: ok").status_code == 200


@pytest.mark.parametrize("path, reason", [
    ("/away", "localhost"),           # a redirect to a host the list does not name
    ("/loop", "redirects"),
    ("/missing", "404"),
])
def test_fetches_the_rule_refuses_are_400s(media_server, files, path, reason):
    """Redirects are checked hop by hop, redirect loops end, and a failed fetch names its
    status."""
    param, message = refusal(ask(media_server, {"type": "input_file",
                                                "file_url": files + path}))
    assert param == "input[0].content[0].file_url"
    assert reason in message


def test_a_host_the_list_does_not_name_is_refused(media_server):
    """Only the hosts --media-fetch names are fetched from."""
    param, message = refusal(ask(media_server, {"type": "input_file",
                                                "file_url": "http://example.com/a.txt"}))
    assert param == "input[0].content[0].file_url" and "example.com" in message


def test_without_media_fetch_urls_are_refused(server, files):
    """By default nothing is fetched: a file_url is a 400 saying how to send the file."""
    param, message = refusal(ask(server, {"type": "input_file",
                                          "file_url": files + "/notes.md"}))
    assert param == "input[0].content[0].file_url"
    assert "--media-fetch" in message and "data URL" in message


PDF = text_pdf(["x"])


@pytest.mark.parametrize("part, param, reason", [
    ({"type": "input_image", "image_url": data_url(image_bytes(), "image/png")},
     "input[0].content[0]", "does not take image input"),
    ({"type": "input_image", "file_id": "file-1"}, "input[0].content[0]", "image input"),
    ({"type": "input_file", "file_id": "file-1"}, "input[0].content[0].file_id", "Files API"),
    ({"type": "input_file", "filename": "a.txt"}, "input[0].content[0].file_data",
     "exactly one"),
    ({"type": "input_file", "filename": "a.txt", "file_data": "aGk=",
      "file_url": "http://127.0.0.1/a"}, "input[0].content[0].file_url", "exactly one"),
    ({"type": "input_file", "filename": "a.txt", "file_data": "***"},
     "input[0].content[0].file_data", "base64"),
    ({"type": "input_file", "filename": "doc.pdf", "file_data": b64(PDF[:len(PDF) // 2])},
     "input[0].content[0].file_data", "corrupt"),
    ({"type": "input_file", "filename": "a.zip",
      "file_data": data_url(b"PK\x03\x04\x00\x00\xff\xfe", "application/zip")},
     "input[0].content[0].file_data", "unsupported file type"),
    ({"type": "input_file", "filename": "a.txt", "file_data": b64(b"\xff\xfe\x00bad")},
     "input[0].content[0].file_data", "not UTF-8"),
    ({"type": "input_file", "filename": "a.json", "file_data": b64(b"{not json")},
     "input[0].content[0].file_data", "JSON"),
    ({"type": "input_file", "file_url": "file:///etc/passwd"},
     "input[0].content[0].file_url", "http(s)"),
])
def test_bad_media_is_a_400_naming_the_field(media_server, part, param, reason):
    """Each bad file, and any image for this text-only model, is a 400 with its field as
    `param` and the reason in the message."""
    got_param, message = refusal(ask(media_server, part, text="hi"))
    assert got_param == param
    assert reason in message


def test_an_image_in_a_tool_output_names_the_output_part(media_server):
    """An image inside a function_call_output, for a text-only model, names that part."""
    r = media_server.http.post("/v1/responses", json={"model": MODEL, "input": [
        {"type": "function_call", "call_id": "call_1", "name": "view_image",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_image", "image_url": data_url(image_bytes(), "image/png")}]}]})
    param, message = refusal(r)
    assert param == "input[1].output[0]" and "image input" in message


def test_the_models_list_says_which_inputs_the_model_takes(media_server):
    """/v1/models: the bundled model takes text and files (as text), no images."""
    [model] = media_server.http.get("/v1/models").json()["data"]
    assert model["input_modalities"] == ["text", "file"]
