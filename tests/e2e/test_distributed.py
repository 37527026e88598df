"""`--distributed pipeline|tensor` end to end: two ranks on loopback (MLX's ring backend),
each a real `triode serve` process, rank 0 serving HTTP to the openai SDK, on a random-weight
Qwen2 that shards both ways (tests/fixtures/distributed.py). What they generate is checked
against one process serving the same weights; a follower is killed and stopped (SIGSTOP) to
check that rank 0 fails closed (docs/deployment.md)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ..conftest import run_server, wait_until
from ..fixtures.distributed import build_qwen2, hostfile, run_group, start_rank

MODES = ("pipeline", "tensor")
PROMPTS = ("Tell me about rivers", "List three colours", "Count to five please")


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    return build_qwen2(tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="module")
def reference(qwen2):
    """One process on the same weights, as the group runs them."""
    with run_server("--model", str(qwen2), "--speculative", "off") as server:
        yield server


@pytest.fixture(scope="module", params=MODES)
def group(request, qwen2, tmp_path_factory):
    """Speculative decoding on (the default), rank 0 choosing each step's drafts: greedy and
    seeded output is the same as the reference's, which does not speculate."""
    with run_group(tmp_path_factory.mktemp(f"group-{request.param}"), request.param,
                   qwen2, "--speculative", "ngram") as g:
        yield g


def model_of(server) -> str:
    return server.health()["model"]


def answer(server, prompt: str, **kwargs):
    client = server.client()
    return client.responses.create(model=model_of(server), input=prompt,
                                   max_output_tokens=kwargs.pop("max_output_tokens", 24),
                                   **kwargs)


def streamed(server, model: str, prompt: str, **kwargs) -> tuple[str, str]:
    """A stream's text and its terminal event's type (a client of its own: this runs in
    threads, and an httpx client is not to be shared between them)."""
    client = server.client()
    text, end = [], ""
    for event in client.responses.create(model=model, input=prompt, stream=True, **kwargs):
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        elif event.type in ("response.completed", "response.incomplete", "response.failed"):
            end = event.type
    return "".join(text), end


def concurrently(server, requests: list[dict]) -> list[tuple[str, str]]:
    """The streams of `requests`, run at once; what a stream raised is raised here."""
    model = model_of(server)
    results: list[tuple[str, str] | BaseException | None] = [None] * len(requests)

    def one(i: int) -> None:
        try:
            results[i] = streamed(server, model, **requests[i])
        except BaseException as exc:   # raised below, in the test's thread
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a stream did not end within 120 s"
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [r for r in results if isinstance(r, tuple)]


def test_concurrent_streams_generate_what_one_process_does(group, reference):
    requests = [dict(prompt=p, temperature=0, max_output_tokens=24) for p in PROMPTS]
    # A sampled request too: a seed makes it reproducible, on one process or on many.
    requests.append(dict(prompt="Name a bird", temperature=1.0, top_p=0.9,
                         max_output_tokens=24, extra_body={"seed": 7}))
    mine = concurrently(group.server, requests)
    theirs = concurrently(reference, requests)
    assert all(text for text, _ in mine)
    assert mine == theirs


def test_a_ten_turn_chain_reuses_the_prompt_cache_as_one_process_does(group, reference):
    key = f"chain-{group.server.health()['distributed']['mode']}"   # a namespace of its own

    def chain(server) -> list[tuple[str, int]]:
        turns, previous = [], None
        for i in range(10):
            r = answer(server, f"Turn {i}: go on", temperature=0, max_output_tokens=8,
                       previous_response_id=previous, prompt_cache_key=key)
            turns.append((r.output_text, r.usage.input_tokens_details.cached_tokens))
            previous = r.id
        return turns

    mine, theirs = chain(group.server), chain(reference)
    assert mine == theirs
    assert all(cached > 0 for _, cached in mine[1:])   # each turn reused the one before


def test_a_cancelled_and_a_disconnected_stream_leave_the_group_serving(group, reference):
    client = group.server.client()
    model = model_of(group.server)
    job = client.responses.create(model=model, input="Write a long story", background=True,
                                  max_output_tokens=3000)
    wait_until(lambda: group.server.health()["generation"]["tokens"] > 0)
    client.responses.cancel(job.id)
    wait_until(lambda: client.responses.retrieve(job.id).status == "cancelled")

    with group.server.http.stream("POST", "/v1/responses", json={
            "model": model, "input": "Write a long poem", "stream": True,
            "max_output_tokens": 2000}) as r:
        for line in r.iter_lines():
            if "output_text.delta" in line:
                break   # the client goes away mid-stream
    wait_until(lambda: group.server.health()["slots"]["busy"] == 0)
    assert answer(group.server, PROMPTS[0], temperature=0).output_text == \
        answer(reference, PROMPTS[0], temperature=0).output_text


def test_a_background_job_completes_and_is_stored(group, reference):
    client = group.server.client()
    job = client.responses.create(model=model_of(group.server), input=PROMPTS[1],
                                  background=True, temperature=0, max_output_tokens=24)
    done = wait_until(lambda: (r := client.responses.retrieve(job.id)).status not in
                      ("queued", "in_progress") and r, timeout=60)
    assert done.status in ("completed", "incomplete")
    assert done.output_text == answer(reference, PROMPTS[1], temperature=0).output_text


def test_twenty_concurrent_requests_with_random_cancels_do_not_hang(group):
    model = model_of(group.server)
    rng = random.Random(42)
    plans = [rng.choice(("read", "close", "cancel")) for _ in range(20)]
    rng_delays = [rng.uniform(0, 0.3) for _ in range(20)]
    failures: list[BaseException] = []

    def one(i: int, plan: str) -> None:
        client = group.server.client()   # each thread its own connection pool
        try:
            if plan == "cancel":
                job = client.responses.create(model=model, input=f"Request {i}",
                                              background=True, max_output_tokens=48)
                time.sleep(rng_delays[i])
                client.responses.cancel(job.id)
                return
            events = client.responses.create(model=model, input=f"Request {i}", stream=True,
                                             max_output_tokens=48)
            for seen, _ in enumerate(events, 1):
                if plan == "close" and seen == 3 + i % 5:
                    break   # the client goes away
            events.close()
        except BaseException as exc:   # reported below
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(plans)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "requests hung"
    assert not failures, failures
    wait_until(lambda: group.server.health()["slots"]["busy"] == 0, timeout=60)
    assert group.server.health()["status"] == "ok"
    assert answer(group.server, PROMPTS[2], temperature=0).output_text


def test_health_metrics_and_the_live_page_show_every_rank(group):
    for i in range(20):   # past a gathering of the ranks' figures (every 32 forward passes)
        answer(group.server, f"{PROMPTS[i % 3]} {i}", max_output_tokens=24, temperature=0)
        health = group.server.health()
        if health["distributed"]["ranks"][0]["steps"]:
            break
    d = health["distributed"]
    assert d["mode"] in MODES
    assert d["failure"] is None and [r["rank"] for r in d["ranks"]] == [0, 1]
    assert all(r["steps"] > 0 and r["step_seconds"] > 0 for r in d["ranks"])
    # Rank 0 chose speculative steps, and every rank verified the same drafts.
    assert health["speculation"]["speculative_steps"] > 0
    assert health["speculation"]["accepted_tokens"] > 0
    metrics = group.server.http.get("/metrics").text
    assert "triode_distributed_up 1.0" in metrics
    assert 'triode_distributed_steps_total{rank="1"}' in metrics
    assert 'triode_distributed_record_seconds_total{rank="0"}' in metrics
    snapshot = group.server.http.get("/ui/events").json()
    assert [r["rank"] for r in snapshot["distributed"]["ranks"]] == [0, 1]
    # The model stays loaded: unloading it would end the other ranks' shards.
    r = group.server.http.post(f"/v1/models/{Path(model_of(group.server)).name}/unload")
    assert r.status_code == 400 and "--distributed" in r.json()["error"]["message"]


def test_the_live_page_draws_every_rank_in_the_actor_tree(group):
    """In a browser: the ranks under the engine thread, each with its forward passes."""
    from .browser import browser, page_on

    with browser() as context, page_on(context, group.server.base_url + "/ui") as (
            page, errors):
        page.wait_for_selector("#conn[data-state=live]")
        for rank in (0, 1):
            page.wait_for_selector(f"#tree [data-rank='{rank}'][data-field='steps']")
        assert page.locator("#tree").inner_text().count("in step") == 2
        assert errors == []


# ---- failing closed ---------------------------------------------------------------------------

def stream_until_deltas(server, count: int, **kwargs):
    """A long stream, read until `count` text deltas arrived; the rest of its events."""
    client = server.client()
    # Greedy: the same long answer each run (a sampled one could end on its own first).
    events = iter(client.responses.create(model=model_of(server), input="Write forever",
                                          stream=True, max_output_tokens=3000, temperature=0,
                                          **kwargs))
    response_id = None
    seen = 0
    for event in events:
        if event.type == "response.created":
            response_id = event.response.id
        if event.type == "response.output_text.delta":
            seen += 1
            if seen == count:
                break
    return response_id, events


def terminal(events) -> str:
    types = [e.type for e in events]
    return types[-1] if types else ""


def test_a_follower_killed_mid_stream_fails_the_group_closed(qwen2, tmp_path):
    with run_group(tmp_path, "pipeline", qwen2, "--distributed-on-failure", "stay") as g:
        job = g.server.client().responses.create(
            model=model_of(g.server), input="Write forever", background=True,
            temperature=0, max_output_tokens=3000)
        response_id, events = stream_until_deltas(g.server, 3)
        g.followers[0].kill()
        done: list[str] = []
        reader = threading.Thread(target=lambda: done.append(terminal(events)))
        reader.start()
        reader.join(60)
        assert done == ["response.failed"]
        stored = g.server.client().responses.retrieve(response_id)
        assert stored.status == "failed"
        # The background job running beside it ends failed too, and is kept.
        wait_until(lambda: g.server.client().responses.retrieve(job.id).status == "failed")
        health = g.server.http.get("/health")
        assert health.status_code == 503
        assert health.json()["distributed"]["failure"]
        assert "triode_distributed_up 0.0" in g.server.http.get("/metrics").text
        r = g.server.http.post("/v1/responses", json={"model": model_of(g.server),
                                                      "input": "hi"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_unavailable"


def test_with_exit_rank_0_shuts_down_once_a_follower_dies(qwen2, tmp_path):
    # A peer's death can leave rank 0 inside a collective that never returns (MLX's ring
    # backend fails the forward pass's send but not a collective queued behind it): the
    # watchdog is what notices then.
    with run_group(tmp_path, "tensor", qwen2, "--distributed-watchdog", "5") as g:
        response_id, events = stream_until_deltas(g.server, 3)
        g.followers[0].kill()
        assert terminal(events) == "response.failed"
        assert g.server.proc.wait(60) == 1
        assert any("the group failed" in line for line in g.server.log)


def test_a_stalled_follower_trips_the_watchdog(qwen2, tmp_path):
    with run_group(tmp_path, "tensor", qwen2, "--distributed-on-failure", "stay",
                   "--distributed-watchdog", "2") as g:
        follower = g.followers[0]
        try:
            response_id, events = stream_until_deltas(g.server, 3)
            os.kill(follower.pid, signal.SIGSTOP)
            began = time.monotonic()
            assert terminal(events) == "response.failed"
            assert time.monotonic() - began < 30
            health = g.server.http.get("/health")
            assert health.status_code == 503
            assert "--distributed-watchdog" in health.json()["distributed"]["failure"]
            assert g.server.client().responses.retrieve(response_id).status == "failed"
            # Its engine thread is hung in a collective; a shutdown still ends.
            g.server.proc.terminate()
            assert g.server.proc.wait(40) == 0
        finally:
            os.kill(follower.pid, signal.SIGCONT)
            follower.kill()


def test_sigterm_on_rank_0_ends_every_rank(qwen2, tmp_path):
    with run_group(tmp_path, "pipeline", qwen2) as g:
        assert answer(g.server, PROMPTS[0]).output_text
        g.server.proc.terminate()
        assert g.server.proc.wait(30) == 0
        assert g.followers[0].wait(30) == 0
        assert "rank 0 stopped the group" in g.follower_log()


# ---- what cannot be sharded or kept in step -----------------------------------------------------

def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "triode", "serve", "--port", "0", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("flags, message", [
    (("--kv-bits", "8"), "--kv-bits is not kept in lockstep yet"),
    (("--prompt-cache-dir", "/tmp/x"), "--prompt-cache-dir is not kept in lockstep yet"),
    (("--model", "bundled", "--model", "smollm2"), "serves one model"),
    (("--distributed-watchdog", "0"), "--distributed-watchdog must be more than 0"),
])
def test_what_cannot_run_in_lockstep_is_refused_at_startup(flags, message):
    done = serve("--distributed", "tensor", *flags)
    assert done.returncode == 2 and message in done.stderr


def test_a_rank_started_without_a_group_is_refused():
    done = serve("--distributed", "pipeline", env={"MLX_RANK": ""})
    assert done.returncode == 1
    assert "start every rank with mlx.launch" in done.stderr


@pytest.mark.parametrize("mode, message", [
    ("tensor", "the model's 3 attention heads do not split evenly over 2 ranks"),
    ("pipeline", "cannot be split into a pipeline (it has no pipeline())"),
])
def test_a_model_that_cannot_be_sharded_so_is_a_one_line_error_on_every_rank(
        mode, message, tmp_path):
    hosts = hostfile(tmp_path)
    log = tmp_path / "rank1.log"
    follower = start_rank(1, hosts, ["--distributed", mode], log=log)
    done = serve("--distributed", mode, env={"MLX_RANK": "0", "MLX_HOSTFILE": str(hosts)})
    assert follower.wait(60) == 1
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert message in log.read_text()



def test_a_group_started_by_mlx_launch_serves(qwen2, reference):
    """mlx.launch itself (MLX's launcher: it writes the ring hostfile and sets MLX_RANK)
    starts both ranks of the very command a user types."""
    from ..fixtures.distributed import free_ports

    http, ring = free_ports(2)
    launcher = Path(sys.executable).parent / "mlx.launch"
    proc = subprocess.Popen(
        [str(launcher), "-n", "2", "--backend", "ring", "-p", str(ring), "--",
         sys.executable, "-m", "triode", "serve", "--distributed", "tensor", "--model",
         str(qwen2), "--port", str(http)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    listening = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "triode listening on" in line:
                listening.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert listening.wait(120), "".join(lines)
        import openai

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{http}/v1", api_key="x",
                               max_retries=0)
        mine = client.responses.create(model=str(qwen2), input=PROMPTS[0], temperature=0,
                                       max_output_tokens=24)
        assert mine.output_text == answer(reference, PROMPTS[0], temperature=0).output_text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wait_until(lambda: subprocess.run(["pgrep", "-f", "--", f"--port {http}"],
                                      capture_output=True).returncode == 1, timeout=30)
