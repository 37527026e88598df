"""The response builder: one set of calls makes both the stream's events and the final
object, so ids, order and text agree in both; each event carries a snapshot of what it
shows; the end of a response closes what is still open."""

from __future__ import annotations

from triode.model.request import Sampling
from triode.responses import translate, wire
from triode.responses.builder import ResponseBuilder
from triode.responses.convert import structure
from triode.responses.lifecycle import Status
from triode.responses.objects import plain, usage


def builder(**kwargs) -> ResponseBuilder:
    req = structure({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}]},
                    wire.CreateResponse)
    built = ResponseBuilder("resp_1", translate.plan(req, Sampling()).echo, **kwargs)
    built.created()
    built.enter(Status.IN_PROGRESS)
    return built


def types(built: ResponseBuilder) -> list[str]:
    return [e.type for e in built.events]


def test_the_stream_and_the_object_show_the_same_items_in_the_same_order():
    """The items the stream adds are the object's output, same ids and order; sequence
    numbers count from 0 without a gap."""
    built = builder()
    built.reasoning("think")
    built.reasoning_done("think")
    built.text("Hel")
    built.text("lo")
    built.call_start(0, kind="function", name="f", namespace=None)
    built.call_done(0, "{}")
    built.enter(Status.COMPLETED, usage(3, 4))
    added = [plain(e)["item"]["id"] for e in built.events
             if e.type == "response.output_item.added"]
    assert added == [item.id for item in built.obj.output]
    assert [plain(e)["sequence_number"] for e in built.events] == list(range(len(built.events)))
    final = plain(built.events[-1])["response"]
    assert final["output"] == plain(built.obj)["output"]
    assert final["output"][1]["content"][0]["text"] == "Hello"


def test_an_event_shows_its_object_as_it_was_when_sent():
    """`response.created` keeps the queued, empty response it announced, whatever came
    after it."""
    built = builder()
    built.text("words")
    built.enter(Status.COMPLETED, usage(1, 1))
    created = plain(built.events[0])["response"]
    assert (created["status"], created["output"]) == ("queued", [])
    assert plain(built.obj)["status"] == "completed"


def test_text_before_a_tool_call_ends_its_message_first():
    """A call opening after text closes the message (text done, part done, item done) before
    the call's item is added."""
    built = builder()
    built.text("Let me look.")
    built.call_start(0, kind="function", name="f", namespace=None)
    assert types(built)[-4:] == ["response.output_text.done", "response.content_part.done",
                                 "response.output_item.done", "response.output_item.added"]
    assert built.obj.output[0].status == "completed"


def test_the_final_parse_of_a_call_wins_and_sends_what_the_deltas_missed():
    """A call's `.done` carries the final arguments; what the deltas had not yet sent goes
    out as one more delta first."""
    built = builder()
    built.call_start(0, kind="function", name="f", namespace=None)
    built.call_delta(0, '{"a"')
    built.call_done(0, '{"a": 1}')
    deltas = [plain(e)["delta"] for e in built.events
              if e.type == "response.function_call_arguments.delta"]
    assert deltas == ['{"a"', ': 1}']
    done = plain(built.events[-2])
    assert (done["type"], done["arguments"]) == ("response.function_call_arguments.done",
                                                 '{"a": 1}')


def test_a_response_cut_off_by_the_token_limit_leaves_its_open_items_incomplete():
    """`incomplete` closes every open item as incomplete and says why."""
    built = builder()
    built.text("partial")
    built.call_start(0, kind="custom", name="f", namespace=None)
    built.call_delta(0, "half")
    built.enter(Status.INCOMPLETE, usage(3, 4))
    obj = plain(built.obj)
    assert [item["status"] for item in obj["output"]] == ["completed", "incomplete"]
    assert obj["output"][1]["type"] == "custom_tool_call"
    assert obj["incomplete_details"] == {"reason": "max_output_tokens"}
    assert types(built)[-1] == "response.incomplete"


def test_a_cancel_sends_no_event_and_records_the_cancellation_on_the_object():
    """OpenAI's stream has no event for a cancel: the object alone says it, its open items
    incomplete."""
    built = builder()
    built.text("stopped mid")
    sent = len(built.events)
    built.enter(Status.CANCELLED, usage(3, 2))
    assert len(built.events) == sent
    assert built.obj.status is Status.CANCELLED
    assert built.obj.output[0].status == "incomplete"
    assert built.obj.completed_at is not None
