"""How much memory a full ResponseStore really holds, next to its byte budget.

Stores 20,000 realistic responses (a completed response object with one output message and
usage, plus its few dozen stream events: 3-10 KB of JSON each) into a ResponseStore with a
64 MiB byte budget, then prints the growth of the process RSS against the budget. The store
keeps only what the budget allows, so the ratio shows how faithfully "approximate retained
JSON bytes" stands for real memory; it must stay under 2.

    PYTHONPATH=src python bench/store_memory.py
"""

from __future__ import annotations

import gc
import random
import time

import trio

from triode.actors.store import ResponseStore
from triode.storage.records import StoredResponse, encode_json

RESPONSES = 20_000
BYTE_BUDGET = 64 * 1024 * 1024
WORDS = (
    "the of and to in is you that it was for on are as with they at be this have from or "
    "one had by word but not what all were we when your can said 생각 データ ünïcödé"
).split()


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def make_response(n: int, rng: random.Random) -> tuple[dict, list[dict]]:
    """A completed response and the stream events that produced it, all fresh objects."""
    response_id, message_id = f"resp_{n:048x}", f"msg_{n:048x}"
    deltas = [
        " " + " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))
        for _ in range(rng.randint(3, 18))
    ]
    text = "".join(deltas)

    def response(status: str, output: list, usage: dict | None) -> dict:
        return {
            "id": response_id, "object": "response", "created_at": 1_700_000_000 + n,
            "status": status, "error": None, "incomplete_details": None,
            "instructions": "You are a helpful assistant.", "max_output_tokens": None,
            "model": "triode-tiny", "output": output, "parallel_tool_calls": True,
            "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
            "store": True, "temperature": 1.0, "text": {"format": {"type": "text"}},
            "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
            "usage": usage, "user": None, "metadata": {},
        }

    def message(status: str) -> dict:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return {"type": "message", "id": message_id, "status": status, "role": "assistant",
                "content": [part] if status == "completed" else []}

    usage = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 4 * len(deltas), "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 40 + 4 * len(deltas)}
    located = {"item_id": message_id, "output_index": 0, "content_index": 0}
    events = [
        {"type": "response.created", "response": response("queued", [], None)},
        {"type": "response.in_progress", "response": response("in_progress", [], None)},
        {"type": "response.output_item.added", "output_index": 0, "item": message("in_progress")},
        {"type": "response.content_part.added", **located,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        *({"type": "response.output_text.delta", **located, "delta": delta, "logprobs": []}
          for delta in deltas),
        {"type": "response.output_text.done", **located, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **located,
         "part": message("completed")["content"][0]},
        {"type": "response.output_item.done", "output_index": 0, "item": message("completed")},
        {"type": "response.completed",
         "response": response("completed", [message("completed")], usage)},
    ]
    for sequence_number, event in enumerate(events):
        event["sequence_number"] = sequence_number
    return response("completed", [message("completed")], usage), events


async def main() -> None:
    rng = random.Random(0)
    store = ResponseStore(max_entries=RESPONSES, max_bytes=BYTE_BUDGET, ttl_secs=3600)
    async with trio.open_nursery() as nursery:
        responses = await nursery.start(store.run)
        gc.collect()
        baseline = rss_bytes()
        started = time.perf_counter()
        for n in range(RESPONSES):
            response, events = make_response(n, rng)
            record = {"response": response, "input": []}
            await responses.put(response["id"],
                                StoredResponse(encode_json(record), encode_json(events)))
        elapsed = time.perf_counter() - started
        del response, events
        gc.collect()
        growth = rss_bytes() - baseline
        stats = await responses.statistics()
        mib = 1024 * 1024
        print(f"stored {RESPONSES} responses in {elapsed:.1f} s "
              f"(mean {stats.bytes / stats.entries / 1024:.1f} KiB each as retained)")
        print(f"retained: {stats.entries} entries, {stats.bytes / mib:.1f} MiB; "
              f"evictions: {stats.evictions}")
        print(f"RSS growth {growth / mib:.1f} MiB  budget {BYTE_BUDGET / mib:.0f} MiB  "
              f"ratio {growth / BYTE_BUDGET:.2f} (must be < 2)")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
