"""The vision models whose images are sized by their own size, through a real server and the
openai SDK: Qwen2-VL, Qwen2.5-VL and Qwen3-VL (tests/fixtures/qwen_vl.py; M-RoPE positions,
model/mrope.py), Mistral 3 and Pixtral (tests/fixtures/mistral3_vlm.py; rows of image tokens
broken by `[IMG_BREAK]`), each mlx-vlm's classes with random weights. Images are counted by
their sizes (as the counting endpoint counts them), several per request and in tool outputs;
a chain's next turn, served from the prompt cache past its images (and from the disk tier
once evicted), answers exactly what a server without a prompt cache answers the same history
(Qwen-VL's position deltas travel with the cached prefix); requests at once answer as
alone."""

from __future__ import annotations

import pytest

from ..conftest import run_server, wait_until
from ..fixtures import mistral3_vlm, qwen_vl
from ..fixtures.media import data_url, image_bytes

MODEL = "vision"
TURN = dict(max_output_tokens=6, temperature=0)
KINDS = qwen_vl.KINDS + mistral3_vlm.KINDS


def added(kind: str, width: int, height: int) -> int:
    """The tokens an image of this size adds to a prompt without it: Qwen-VL's image tokens
    between `<|vision_start|>` and `<|vision_end|>`; Pixtral's rows of `[IMG]`, each ended by
    `[IMG_BREAK]` but the last by `[IMG_END]`."""
    if kind in qwen_vl.KINDS:
        return qwen_vl.image_tokens(width, height) + 2
    rows, columns = mistral3_vlm.image_rows(width, height, kind)
    return rows * (columns + 1)


def build(kind: str, directory):
    return (qwen_vl if kind in qwen_vl.KINDS else mistral3_vlm).build(directory, kind)


def png(seed: int, width: int, height: int) -> dict:
    return {"type": "input_image", "image_url": data_url(image_bytes(width, height, seed=seed),
                                                         "image/png")}


def user(*images: dict, text: str = "What is in the image?") -> dict:
    return {"role": "user", "content": [{"type": "input_text", "text": text}, *images]}


@pytest.fixture(scope="module", params=KINDS)
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def model_dir(kind, tmp_path_factory):
    return build(kind, tmp_path_factory.mktemp(kind))


@pytest.fixture(scope="module")
def server(model_dir):
    with run_server("--model", str(model_dir), "--model-alias", MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def uncached(model_dir):
    """The same model with no prompt cache: every request prefilled whole."""
    with run_server("--model", str(model_dir), "--model-alias", MODEL,
                    "--prompt-cache-bytes", "0") as s:
        yield s


def test_images_are_counted_by_their_own_sizes(server, kind):
    """An image adds its tokens (for its resized size) and its markers; two images of other
    sizes add theirs; the counting endpoint agrees."""
    client = server.client()
    text_only = client.responses.create(model=MODEL, input=[user()], **TURN)
    one = client.responses.create(model=MODEL, input=[user(png(1, 70, 50))], **TURN)
    assert one.status in ("completed", "incomplete")
    base = text_only.usage.input_tokens
    assert one.usage.input_tokens == base + added(kind, 70, 50)
    counted = server.http.post("/v1/responses/input_tokens", json={
        "model": MODEL, "input": [user(png(1, 70, 50))]})
    assert counted.json()["input_tokens"] == one.usage.input_tokens
    two = client.responses.create(model=MODEL, input=[user(png(2, 30, 90), png(3, 64, 20))],
                                  **TURN)
    assert two.usage.input_tokens == base + added(kind, 30, 90) + added(kind, 64, 20)
    assert added(kind, 30, 90) != added(kind, 64, 20)


def test_an_image_in_a_tool_output_is_counted(server, kind):
    """A screenshot in a function_call_output (Codex's view_image) is an image input."""
    def turn(output):
        return server.client().responses.create(model=MODEL, input=[
            {"role": "user", "content": "Look at the screen."},
            {"type": "function_call", "call_id": "call_1", "name": "view_image",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": output}], **TURN)

    with_image = turn([png(4, 40, 40)])
    assert with_image.usage.input_tokens == turn("").usage.input_tokens + added(kind, 40, 40)


def history(first_input: list[dict], first, follow: str) -> list[dict]:
    return [*first_input, {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": follow}]


def test_a_chain_past_its_images_answers_what_an_uncached_server_does(server, uncached):
    """Turn 1 with two images, then turn 2 by previous_response_id: its prefix (images
    included) comes from the prompt cache, and its answer is token for token the uncached
    server's for the same history sent whole."""
    client = server.client()
    first_input = [user(png(5, 70, 50), png(6, 30, 90), text="Compare these.")]
    first = client.responses.create(model=MODEL, input=first_input, **TURN)
    theirs_first = uncached.client().responses.create(model=MODEL, input=first_input, **TURN)
    assert first.output_text == theirs_first.output_text
    second = client.responses.create(model=MODEL, input="And the colours?",
                                     previous_response_id=first.id, **TURN)
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1
    theirs = uncached.client().responses.create(
        model=MODEL, input=history(first_input, first, "And the colours?"), **TURN)
    assert theirs.usage.input_tokens_details.cached_tokens == 0
    assert second.usage.input_tokens == theirs.usage.input_tokens
    assert second.output_text == theirs.output_text


# KV cache bytes per token of every fixture: 2 layers x (keys + values) x 1 KV head x 32
# dimensions x 4 bytes, plus Qwen-VL's position layer (model/mrope.py).
KV_BYTES_PER_TOKEN = 2 * 2 * 32 * 4 + 8


def test_a_prefix_evicted_to_disk_comes_back_with_its_images(model_dir, uncached, tmp_path):
    """With room in memory for one conversation, a second evicts the first to the disk
    tier; the first's next turn is prefilled from the file, and answers what the uncached
    server answers."""
    first_input = [user(png(7, 70, 50))]
    counted = uncached.http.post("/v1/responses/input_tokens", json={
        "model": MODEL, "input": first_input}).json()["input_tokens"]
    room = int(1.4 * KV_BYTES_PER_TOKEN * (counted + TURN["max_output_tokens"]))
    with run_server("--model", str(model_dir), "--model-alias", MODEL,
                    "--prompt-cache-dir", str(tmp_path), "--prompt-cache-bytes", str(room)) \
            as server:
        client = server.client()
        first = client.responses.create(model=MODEL, input=first_input, **TURN)
        client.responses.create(model=MODEL, input=[user(png(8, 50, 70), text="Other.")],
                                **TURN)
        assert server.health()["prompt_cache"]["entries"] == 1
        wait_until(lambda: list(tmp_path.glob("*/*.kv")))
        second = client.responses.create(model=MODEL, input="And the colours?",
                                         previous_response_id=first.id, **TURN)
        assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1
        assert server.health()["prompt_cache"]["disk_hits"] == 1
    theirs = uncached.client().responses.create(
        model=MODEL, input=history(first_input, first, "And the colours?"), **TURN)
    assert second.output_text == theirs.output_text


def test_image_and_text_requests_at_once_answer_as_alone(server, uncached):
    """Six requests at once (images of other sizes and text, one batch) each answer what
    the uncached server answers them one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    inputs = [[user(png(10 + i, 30 + 10 * i, 70 - 5 * i))] if i % 2 else
              [user(text=f"Say {i} things.")] for i in range(6)]
    client = server.client()
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(
            lambda x: client.responses.create(model=MODEL, input=x, **TURN).output_text,
            inputs))
    alone = [uncached.client().responses.create(model=MODEL, input=x, **TURN).output_text
             for x in inputs]
    assert together == alone
