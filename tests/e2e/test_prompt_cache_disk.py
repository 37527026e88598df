"""`--prompt-cache-dir` end to end on the bundled model: a chain's KV cache survives a restart,
entries evicted from memory come back from disk, another configuration never loads them, a
corrupt file is skipped, an unwritable directory is a startup error, and the budget holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..conftest import run_server, wait_until

MODEL = "triode-tiny"
PREFIX = ("You are a terse assistant. Answer with exactly the words you are asked for and "
          "nothing else, in lower case, without punctuation.")


def ask(client, text: str, previous: str | None = None):
    return client.responses.create(model=MODEL, instructions=PREFIX, input=f"Reply with: {text}",
                                   previous_response_id=previous, temperature=0)


def cached(response) -> int:
    return response.usage.input_tokens_details.cached_tokens


def kv_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.kv"))


def test_a_chain_goes_on_from_disk_after_a_restart(tmp_path):
    """Turn 1, a restart (its shutdown writes the memory tier), then turn 2 with its history
    resent whole: its prefix is loaded back from disk, and the answer is still exact."""
    first = None
    with run_server("--prompt-cache-dir", str(tmp_path)) as server:
        first = ask(server.client(), "amber kite")
        assert first.output_text == "amber kite"
    assert kv_files(tmp_path)
    history = [{"role": "user", "content": "Reply with: amber kite"},
               {"role": "assistant", "content": first.output_text},
               {"role": "user", "content": "Reply with: cobalt dune"}]
    with run_server("--prompt-cache-dir", str(tmp_path)) as server:
        second = server.client().responses.create(model=MODEL, instructions=PREFIX,
                                                  input=history, temperature=0)
        assert second.output_text == "cobalt dune"
        assert cached(second) >= first.usage.input_tokens
        stats = server.health()["prompt_cache"]
        assert stats["disk_hits"] == 1 and stats["disk_entries"] >= 1
        assert stats["disk_max_bytes"] == 8589934592
        metrics = server.http.get("/metrics").text
        assert "triode_prompt_cache_disk_hits_total 1.0" in metrics


def test_entries_evicted_from_memory_come_back_from_disk(tmp_path):
    """With room in memory for one sequence, a second evicts the first to disk; extending the
    first then prefills from the file, without a restart."""
    with run_server("--prompt-cache-dir", str(tmp_path), "--prompt-cache-bytes", "1000000") \
            as server:
        client = server.client()
        one = ask(client, "violet river copper lantern 42")
        other = ask(client, "zq")   # evicts `one` from memory; shares only the instructions
        assert (one.output_text, other.output_text) == ("violet river copper lantern 42", "zq")
        assert server.health()["prompt_cache"]["entries"] == 1
        wait_until(lambda: kv_files(tmp_path))   # written by the disk tier's own thread
        follow = ask(client, "cedar plume", previous=one.id)
        assert follow.output_text == "cedar plume"
        assert cached(follow) >= one.usage.input_tokens
        stats = server.health()["prompt_cache"]
        assert stats["disk_hits"] == 1 and stats["disk_writes"] == 1


def test_another_kv_bits_never_loads_the_files(tmp_path):
    """A restart with --kv-bits 8 has another cache key: no hit, its own directory."""
    with run_server("--prompt-cache-dir", str(tmp_path)) as server:
        first = ask(server.client(), "quartz meadow")
    with run_server("--prompt-cache-dir", str(tmp_path), "--kv-bits", "8") as server:
        again = ask(server.client(), "quartz meadow")
        assert again.output_text == first.output_text == "quartz meadow"
        assert cached(again) == 0
        stats = server.health()["prompt_cache"]
        assert stats["disk_hits"] == 0 and stats["disk_entries"] == 0
    assert len([d for d in tmp_path.iterdir() if d.is_dir()]) == 2


def test_a_truncated_file_is_skipped_with_a_log_line(tmp_path):
    """A file cut short (a crash, a full disk) is never loaded: the next server logs it and
    prefills the prompt from scratch."""
    with run_server("--prompt-cache-dir", str(tmp_path)) as server:
        first = ask(server.client(), "ember lantern")
    for path in kv_files(tmp_path):
        path.write_bytes(path.read_bytes()[:-4096])
    with run_server("--prompt-cache-dir", str(tmp_path)) as server:
        again = ask(server.client(), "ember lantern")
        assert again.output_text == first.output_text == "ember lantern"
        assert cached(again) == 0
        assert server.health()["prompt_cache"]["disk_skipped"] >= 1
        assert any("prompt cache: skipping" in line and "truncated" in line
                   for line in server.log)


def test_a_zero_disk_budget_writes_nothing(tmp_path):
    with run_server("--prompt-cache-dir", str(tmp_path), "--prompt-cache-disk-bytes", "0") \
            as server:
        ask(server.client(), "copper lantern")
        assert server.health()["prompt_cache"]["disk_max_bytes"] == 0
    assert kv_files(tmp_path) == []


def test_an_unwritable_directory_is_a_one_line_startup_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = subprocess.run([sys.executable, "-m", "triode", "serve", "--port", "0",
                           "--prompt-cache-dir", str(blocker / "kv")],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    last = [line for line in done.stderr.splitlines() if line.strip()][-1]
    assert last == (f"triode: --prompt-cache-dir: {blocker / 'kv'}: cannot write there "
                    "(Not a directory)"), done.stderr
    assert "loading model" not in done.stderr
