"""The legacy Completions API as a translation (responses/completions.py): every field the
installed `openai` SDK's `CompletionCreateParams` defines has a row in docs/compatibility.md
and is taken, or is a 400 naming it."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from openai.types import completion_create_params

from triode.errors import InvalidRequest
from triode.responses.completions import RawPrompt, legacy_logprobs, to_create

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
FIELDS = sorted({*typing.get_type_hints(completion_create_params.CompletionCreateParamsStreaming),
                 *typing.get_type_hints(
                     completion_create_params.CompletionCreateParamsNonStreaming)})
VALUES = {"best_of": 1, "echo": True, "frequency_penalty": 0.5, "logprobs": 2,
          "max_tokens": 5, "n": 1, "presence_penalty": 0.5, "seed": 1, "stop": "x",
          "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.5,
          "top_p": 0.5, "user": "u", "suffix": None, "logit_bias": {}}


def rows() -> set[str]:
    section = DOC.read_text().split("## `POST /v1/completions`", 1)[1].split("\n## ")[0]
    return {m.group(1) for line in section.splitlines()
            if (m := re.match(r"\| `([^`]+)` \|", line))}


def test_every_field_has_a_row_and_no_row_is_stale():
    assert sorted({f"completions.{f}" for f in FIELDS} ^ rows()) == []


@pytest.mark.parametrize("field", [f for f in FIELDS if f not in ("model", "prompt")])
def test_each_field_is_taken(field):
    t = to_create({"model": "m", "prompt": "hi", field: VALUES[field]})
    assert isinstance(t.create, RawPrompt) and t.create.raw_prompt == "hi"


def test_the_translation():
    t = to_create({"model": "m", "prompt": ["x y"], "logprobs": 3, "echo": True,
                   "stream": True, "stream_options": {"include_usage": True}})
    c = t.create
    assert (c.raw_prompt, c.max_output_tokens, c.top_logprobs, c.store) == ("x y", 16, 3, False)
    assert (t.echo, t.logprobs, t.include_usage) == (True, 3, True)
    assert to_create({"model": "m", "prompt": [[5, 6]]}).create.raw_prompt == [5, 6]


@pytest.mark.parametrize("body,param", [
    ({"prompt": []}, "prompt"), ({"prompt": 3}, "prompt"), ({"prompt": [[1], [2]]}, "prompt"),
    ({"n": 3}, "n"), ({"suffix": "s"}, "suffix"), ({"logprobs": -1}, "logprobs"),
    ({"max_tokens": 0}, "max_tokens"), ({"logit_bias": {"5": 1}}, "logit_bias"),
    ({"bogus": 1}, "bogus"),
])
def test_refusals_name_the_field(body, param):
    with pytest.raises(InvalidRequest) as exc:
        to_create({"model": "m", "prompt": "hi", **body})
    assert exc.value.param == param


def test_logprobs_in_the_older_shape():
    entries = [{"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1},
                                                                 {"token": "b", "logprob": -2}]},
               {"token": "bc", "logprob": -0.5, "top_logprobs": []}]
    assert legacy_logprobs(entries, 4) == {
        "tokens": ["a", "bc"], "token_logprobs": [-0.1, -0.5],
        "top_logprobs": [{"a": -0.1, "b": -2}, {}], "text_offset": [4, 5]}
