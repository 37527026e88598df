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


# ---- a vision model (tests/fixtures/vlm.py: LLaVA-1.5's architecture, random weights) --------

PIXELS = 64 * 64


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    from ..fixtures import vlm as fixture

    directory = fixture.build(tmp_path_factory.mktemp("llava"))
    with run_server("--model", str(directory), "--model-alias", "llava", "--media-fetch",
                    "127.0.0.1", "--media-max-pixels", str(PIXELS)) as s:
        yield s


def look(server, *parts: dict, text: str = "What is in the image?", model: str = "llava",
         **extra) -> httpx.Response:
    return server.http.post("/v1/responses", json={
        "model": model, "max_output_tokens": 4, "temperature": 0,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": text},
                                               *parts]}], **extra})


def png(seed: int = 0, width: int = 40, height: int = 30) -> dict:
    return {"type": "input_image",
            "image_url": data_url(image_bytes(width, height, seed=seed), "image/png")}


def test_an_image_request_counts_the_image_and_the_next_turn_reuses_it(vlm):
    """An image answers 200; input_tokens counts its 16 image tokens (as the counting
    endpoint does); the chain's next turn is served from the prompt cache past the image."""
    from ..fixtures.vlm import IMAGE_TOKENS

    text_only = look(vlm)
    assert text_only.status_code == 200, text_only.text
    first = look(vlm, png(seed=10))
    assert first.status_code == 200, first.text
    used = first.json()["usage"]
    assert used["input_tokens"] >= text_only.json()["usage"]["input_tokens"] + IMAGE_TOKENS
    counted = vlm.http.post("/v1/responses/input_tokens", json={
        "model": "llava", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is in the image?"}, png(seed=10)]}]})
    assert counted.json()["input_tokens"] == used["input_tokens"]
    second = vlm.http.post("/v1/responses", json={
        "model": "llava", "max_output_tokens": 4, "previous_response_id": first.json()["id"],
        "input": "And the colours?"})
    assert second.status_code == 200, second.text
    cached = second.json()["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached >= used["input_tokens"] - 1 > IMAGE_TOKENS


def test_the_prompt_cache_tells_images_apart(vlm):
    """The same text with another image reuses only what precedes the image; the first
    image again reuses its whole prompt."""
    from ..fixtures.vlm import IMAGE_TOKENS

    a = look(vlm, png(seed=20), text="Describe.")
    assert a.status_code == 200, a.text
    b = look(vlm, png(seed=21), text="Describe.")
    assert b.json()["usage"]["input_tokens"] == a.json()["usage"]["input_tokens"]
    # the image's tokens and what follows them are prefilled again
    assert b.json()["usage"]["input_tokens_details"]["cached_tokens"] <= \
        b.json()["usage"]["input_tokens"] - IMAGE_TOKENS - 1
    again = look(vlm, png(seed=20), text="Describe.")
    assert again.json()["usage"]["input_tokens_details"]["cached_tokens"] >= \
        a.json()["usage"]["input_tokens"] - 1 > IMAGE_TOKENS


def test_an_image_in_a_tool_output_reaches_a_vision_model(vlm):
    """Codex's view_image: a screenshot inside a function_call_output (or a
    custom_tool_call_output) is an image input."""
    from ..fixtures.vlm import IMAGE_TOKENS

    def turn(output):
        return vlm.http.post("/v1/responses", json={
            "model": "llava", "max_output_tokens": 4, "input": [
                {"role": "user", "content": "Look at the screen."},
                {"type": "function_call", "call_id": "call_1", "name": "view_image",
                 "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": output}]})

    custom = vlm.http.post("/v1/responses", json={
        "model": "llava", "max_output_tokens": 4, "input": [
            {"role": "user", "content": "Look."},
            {"type": "custom_tool_call", "call_id": "call_2", "name": "shot", "input": "x"},
            {"type": "custom_tool_call_output", "call_id": "call_2", "output": [png(seed=31)]}]})
    assert custom.status_code == 200, custom.text
    assert custom.json()["usage"]["input_tokens"] > IMAGE_TOKENS
    with_image = turn([png(seed=30)])
    assert with_image.status_code == 200, with_image.text
    plain = turn("")
    assert with_image.json()["usage"]["input_tokens"] >= \
        plain.json()["usage"]["input_tokens"] + IMAGE_TOKENS


def test_an_image_url_of_an_allowed_host_is_fetched(vlm, files):
    """An http image_url on the allowed host is fetched, decoded and counted; stored as a
    data URL, so the input items show the bytes and not the URL."""
    Files.routes["/cat.jpg"] = (200, "image/jpeg", image_bytes(50, 50, "JPEG", seed=4), None)
    r = look(vlm, {"type": "input_image", "image_url": files + "/cat.jpg"})
    assert r.status_code == 200, r.text
    items = vlm.http.get(f"/v1/responses/{r.json()['id']}/input_items").json()
    [image] = [p for p in items["data"][0]["content"] if p["type"] == "input_image"]
    assert image["image_url"].startswith("data:image/jpeg;base64,")


def test_images_and_text_requests_run_together(vlm):
    """Image and text requests at once (one batch): every one answers 200 with its own
    input_tokens."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda i: look(vlm, png(seed=40 + i)) if i % 2 else look(vlm),
                            range(6)))
    assert all(r.status_code == 200 for r in got), [r.text for r in got]
    counts = {r.json()["usage"]["input_tokens"] for r in got}
    assert len(counts) == 2


# ---- Gemma 3 (tests/fixtures/gemma3_vlm.py: mlx-vlm's gemma3, random weights) ---------------

@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    from ..fixtures import gemma3_vlm

    directory = gemma3_vlm.build(tmp_path_factory.mktemp("gemma3"))
    with run_server("--model", str(directory), "--model-alias", "gemma3") as s:
        yield s


def test_a_gemma3_image_request_counts_the_image_and_the_next_turn_reuses_it(gemma3):
    """On Gemma 3 an image answers 200; input_tokens counts its 16 soft tokens and the two
    markers around them (as the counting endpoint does); the chain's next turn is served
    from the prompt cache past the image. The fixture's sliding window (16 tokens) is shorter
    than the prompt, so its sliding layer's cache cannot be trimmed back: the next turn
    reuses the first turn's whole sequence when it extends it (the answer re-rendered as the
    tokens generated), else the snapshot kept at the end of the first turn's user message,
    all of its prompt but the generation prompt (`<start_of_turn>model\\n`, 3 tokens)."""
    from ..fixtures.gemma3_vlm import IMAGE_TOKENS, SLIDING_WINDOW

    text_only = look(gemma3, model="gemma3")
    assert text_only.status_code == 200, text_only.text
    first = look(gemma3, png(seed=50), model="gemma3")
    assert first.status_code == 200, first.text
    used = first.json()["usage"]
    assert used["input_tokens"] >= text_only.json()["usage"]["input_tokens"] + IMAGE_TOKENS + 2
    assert used["input_tokens"] > SLIDING_WINDOW
    counted = gemma3.http.post("/v1/responses/input_tokens", json={
        "model": "gemma3", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is in the image?"}, png(seed=50)]}]})
    assert counted.json()["input_tokens"] == used["input_tokens"]
    second = gemma3.http.post("/v1/responses", json={
        "model": "gemma3", "max_output_tokens": 4, "previous_response_id": first.json()["id"],
        "input": "And the colours?"})
    assert second.status_code == 200, second.text
    cached = second.json()["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached >= used["input_tokens"] - 3 > IMAGE_TOKENS


# ---- Idefics3 / SmolVLM (tests/fixtures/idefics3_vlm.py: mlx-vlm's idefics3, random weights)

def test_a_smolvlm_image_request_through_the_sdk_counts_its_image_and_reuses_it(
        tmp_path_factory):
    """On Idefics3 (SmolVLM's architecture), through the openai SDK: an image answers
    `completed`-or-length with its 16 image tokens and the three markers around them counted
    (as the counting endpoint counts them), two images of other sizes are one view each, and
    the chain's next turn is served from the prompt cache past the image."""
    from ..fixtures import idefics3_vlm

    directory = idefics3_vlm.build(tmp_path_factory.mktemp("idefics3"))
    with run_server("--model", str(directory), "--model-alias", "smolvlm") as server:
        client = server.client()

        def content(*images: dict) -> list[dict]:
            return [{"role": "user", "content": [
                {"type": "input_text", "text": "What is in the image?"},
                *[{"type": "input_image", "image_url": i["image_url"]} for i in images]]}]

        text_only = client.responses.create(model="smolvlm", input=content(),
                                            max_output_tokens=4, temperature=0)
        first = client.responses.create(model="smolvlm", input=content(png(seed=60)),
                                        max_output_tokens=4, temperature=0)
        assert first.status in ("completed", "incomplete")
        assert first.usage.input_tokens == \
            text_only.usage.input_tokens + idefics3_vlm.IMAGE_TOKENS + 3
        counted = server.http.post("/v1/responses/input_tokens", json={
            "model": "smolvlm", "input": content(png(seed=60))})
        assert counted.json()["input_tokens"] == first.usage.input_tokens
        two = client.responses.create(
            model="smolvlm", input=content(png(seed=61, width=90, height=20),
                                           png(seed=62, width=20, height=70)),
            max_output_tokens=4, temperature=0)
        assert two.usage.input_tokens == \
            text_only.usage.input_tokens + 2 * (idefics3_vlm.IMAGE_TOKENS + 3)
        second = client.responses.create(model="smolvlm", input="And the colours?",
                                         previous_response_id=first.id, max_output_tokens=4)
        assert second.usage.input_tokens_details.cached_tokens >= \
            first.usage.input_tokens - 1 > idefics3_vlm.IMAGE_TOKENS


@pytest.mark.parametrize("part, param, reason", [
    (png(width=64, height=64), None, None),                 # exactly --media-max-pixels
    (png(width=65, height=64), "input[0].content[1].image_url", f"limit is {PIXELS}"),
    ({"type": "input_image", "image_url": data_url(image_bytes()[:70], "image/png")},
     "input[0].content[1].image_url", "corrupt"),
    ({"type": "input_image", "image_url": data_url(text_pdf(["x"]), "application/pdf")},
     "input[0].content[1].image_url", "not an image"),
    ({"type": "input_image", "image_url": data_url(image_bytes(8, 8, "BMP"), "image/bmp")},
     "input[0].content[1].image_url", "supported"),
    ({"type": "input_image", "file_id": "file-abc"}, "input[0].content[1].file_id",
     "Files API"),
    ({"type": "input_image", "image_url": "https://example.com/a.png"},
     "input[0].content[1].image_url", "example.com"),
    ({**png(), "detail": "ultra"}, "input[0].content[1].detail", "detail"),
])
def test_bad_images_for_a_vision_model_are_400s(vlm, part, param, reason):
    """Each bad image is a 400 naming its field; the pixel limit is exact."""
    r = look(vlm, part)
    if param is None:
        assert r.status_code == 200, r.text
        return
    got, message = refusal(r)
    assert got == param and reason in message


def test_a_vision_model_lists_image_input(vlm):
    """/v1/models: a vision model takes images too."""
    [model] = vlm.http.get("/v1/models").json()["data"]
    assert model["input_modalities"] == ["text", "image", "file"]


def test_a_background_job_with_bad_media_is_refused_at_create(media_server):
    """Media is read before the job is queued: a corrupt PDF in a background create is the
    create's 400 naming the field, and no job exists; a good one's job completes with the
    file's text read."""
    bad = {"type": "input_file", "filename": "doc.pdf", "file_data": b64(PDF[:40])}
    r = media_server.http.post("/v1/responses", json={
        "model": MODEL, "background": True, "input": [{"role": "user", "content": [bad]}]})
    param, _ = refusal(r)
    assert param == "input[0].content[0].file_data"
    good = {"type": "input_file", "filename": "doc.pdf",
            "file_data": b64(text_pdf([f"Reply with: {PHRASE}"]))}
    r = media_server.http.post("/v1/responses", json={
        "model": MODEL, "background": True, "max_output_tokens": 8, "temperature": 0,
        "input": [{"role": "user", "content": [good]}]})
    assert r.status_code == 200, r.text
    from ..conftest import wait_until

    done = wait_until(lambda: (o := media_server.http.get(
        f"/v1/responses/{r.json()['id']}").json())["status"] == "completed" and o)
    assert PHRASE in "".join(c["text"] for item in done["output"]
                             for c in item.get("content", []) if c["type"] == "output_text")


def test_images_through_the_other_apis_reach_a_vision_model(vlm):
    """A Chat Completions `image_url` part, and Anthropic `image` blocks (in a user turn
    and inside a `tool_result`), are the model's image input: each prompt counts the
    image's tokens, as the same image through /v1/responses does."""
    from ..fixtures.vlm import IMAGE_TOKENS

    raw = image_bytes(40, 30, seed=30)
    url = data_url(raw, "image/png")
    responses = look(vlm, {"type": "input_image", "image_url": url}).json()["usage"]
    chat = vlm.http.post("/v1/chat/completions", json={
        "model": "llava", "max_tokens": 4, "temperature": 0, "messages": [{"role": "user",
            "content": [{"type": "text", "text": "What is in the image?"},
                        {"type": "image_url", "image_url": {"url": url}}]}]})
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens"] == responses["input_tokens"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": url.split(",", 1)[1]}}
    messages = vlm.http.post("/v1/messages", json={
        "model": "llava", "max_tokens": 4, "temperature": 0, "messages": [{"role": "user",
            "content": [{"type": "text", "text": "What is in the image?"}, image]}]})
    assert messages.status_code == 200, messages.text
    used = messages.json()["usage"]
    assert used["input_tokens"] + used["cache_read_input_tokens"] == responses["input_tokens"]
    def tool_result(content: list[dict]) -> dict:
        r = vlm.http.post("/v1/messages", json={
            "model": "llava", "max_tokens": 4, "messages": [
                {"role": "user", "content": "Take a screenshot."},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                              "content": content}]}],
            "tools": [{"name": "shot", "input_schema": {"type": "object"}}]})
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        return u["input_tokens"] + u["cache_read_input_tokens"]

    # The image's tokens, in place of one short word.
    assert tool_result([image]) - tool_result([{"type": "text", "text": "x"}]) \
        >= IMAGE_TOKENS - 2
