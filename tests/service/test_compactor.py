"""Compaction with the (fake) model: the oldest turns summarized, the last ones kept, and
every refusal a 400 `context_length_exceeded` raised before anything changes."""

from __future__ import annotations

import pytest

from triode.errors import ContextLengthExceeded
from triode.responses import compaction
from triode.responses.objects import plain
from triode.service.compactor import compact, summarize

from .conftest import CALLER, FakeModel, conversation, request, start_service


async def transcript_of(nursery, model: FakeModel, items):
    """The transcript a create of `items` would compact, and its rendered size."""
    service = await start_service(nursery, model=model)
    transcript, counted = await service.preparer().transcript(CALLER, request(input=items))
    return transcript, len(counted.tokens)


def texts(items) -> list[str]:
    return [item["content"][0]["text"] for item in plain(items)]


async def test_the_oldest_turns_become_a_summary_and_the_last_are_kept(nursery):
    """What `keep_tokens` does not keep is summarized by the model; the compacted history
    (system, summary, kept turns) renders shorter than before."""
    model = FakeModel(reply="a short summary")
    transcript, before = await transcript_of(nursery, model, conversation(turns=4))
    done = await compact(model, transcript, before=before, keep_tokens=8)
    summary, kept = compaction.decode(done.item.encrypted_content, "input")
    assert summary == "a short summary"
    assert texts(done.kept) == ["the last question"]
    assert [item["content"][0]["text"] for item in kept] == ["the last question"]
    assert done.messages[0]["content"] == compaction.SUMMARY_PREFIX + "a short summary"
    assert done.after == len(done.rendered.tokens) < before == done.before
    assert done.usage.output_tokens == 3


async def test_a_history_with_nothing_to_drop_is_refused_unless_short_is_ok(nursery):
    """Every turn kept: `context_management` gets a 400; /compact (`short_ok`) gets the
    history whole in a compaction item with an empty summary (no summary generated)."""
    model = FakeModel()
    transcript, before = await transcript_of(nursery, model, conversation(turns=1))
    with pytest.raises(ContextLengthExceeded) as refused:
        await compact(model, transcript, before=before, keep_tokens=10_000)
    assert refused.value.param == "input"
    whole = await compact(model, transcript, before=before, keep_tokens=10_000, short_ok=True)
    summary, kept = compaction.decode(whole.item.encrypted_content, "input")
    assert summary == ""
    assert len(kept) == len(transcript.history) == 3
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (before, 0)


async def test_a_summary_that_does_not_shorten_the_context_is_refused(nursery):
    """A summary longer than what it replaces: a 400, or with `short_ok` the history kept
    whole (in order, without the summary)."""
    model = FakeModel(reply="word " * 400)
    transcript, before = await transcript_of(nursery, model, conversation(turns=2, words=2))
    with pytest.raises(ContextLengthExceeded) as refused:
        await compact(model, transcript, before=before, keep_tokens=8)
    assert "does not shorten" in refused.value.message
    whole = await compact(model, transcript, before=before, keep_tokens=8, short_ok=True)
    assert compaction.decode(whole.item.encrypted_content, "input")[0] == ""
    assert texts(whole.kept)[0].startswith("question 0")
    assert len(whole.kept) == len(transcript.history)


async def test_a_history_too_long_to_summarize_is_refused(nursery):
    """The summary's own prompt must fit the context window."""
    model = FakeModel(context_length=20)
    transcript, _ = await transcript_of(nursery, model, conversation(turns=2))
    with pytest.raises(ContextLengthExceeded) as refused:
        await summarize(model, None, transcript.history, 100, {})
    assert refused.value.param == "input"
