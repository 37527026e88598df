"""Constrained decoding: text.format and forced tool calls hold whatever the model prefers.

The model is a tiny randomly initialised qwen3 with the bundled tokenizer, so nothing here
depends on training: every valid output below is the grammar's doing. Schemas are bounded
(maxLength, maxItems, integer ranges, no extra keys) so that any path through them ends
within a few dozen tokens.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from triode.errors import InvalidRequest
from triode.model import constraints
from triode.model.constraints import (
    InvalidSchema, compile_text_format, custom_tool_grammar, make_processor, tool_call_grammar,
)

TINY = Path(constraints.__file__).parent / "tiny"
MAX_TOKENS = 64

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10},
                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "tags", "address"],
    "additionalProperties": False,
}
FLAGS = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"},
                   "level": {"type": "integer", "minimum": -5, "maximum": 5},
                   "note": {"type": ["string", "null"], "maxLength": 6}},
    "required": ["ok", "level", "note"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function", "name": "get_weather",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 12},
                                  "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False},
}
ADD = {  # the nested Chat shape
    "type": "function",
    "function": {"name": "add",
                 "parameters": {"type": "object",
                                "properties": {"a": {"type": "integer", "minimum": 0,
                                                     "maximum": 99},
                                               "b": {"type": "integer", "minimum": 0,
                                                     "maximum": 99}},
                                "required": ["a", "b"], "additionalProperties": False}},
}


# ---- helpers --------------------------------------------------------------------------------

def conforms(value, schema) -> bool:
    """A validator for the JSON Schema subset these tests use."""
    if "enum" in schema:
        return value in schema["enum"]
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    for kind in kinds:
        if kind == "null" and value is None:
            return True
        if kind == "boolean" and isinstance(value, bool):
            return True
        if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return schema.get("minimum", value) <= value <= schema.get("maximum", value)
        if kind == "string" and isinstance(value, str):
            return (len(value) <= schema.get("maxLength", len(value))
                    and re.search(schema.get("pattern", ""), value) is not None)
        if kind == "array" and isinstance(value, list):
            return (len(value) <= schema.get("maxItems", len(value))
                    and all(conforms(v, schema["items"]) for v in value))
        if kind == "object" and isinstance(value, dict):
            props = schema.get("properties", {})
            return (set(schema.get("required", [])) <= set(value)
                    and (schema.get("additionalProperties", True) is not False
                         or set(value) <= set(props))
                    and all(conforms(v, props[k]) for k, v in value.items() if k in props))
    return False


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random 2-layer qwen3 with the bundled tokenizer, loaded through `mlx_lm.load`."""
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.models import qwen3

    path = tmp_path_factory.mktemp("tiny-random")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY / name, path / name)
    config = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
              "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2,
              "head_dim": 32, "rms_norm_eps": 1e-6, "vocab_size": 1035,
              "max_position_embeddings": 512, "rope_theta": 10000.0,
              "tie_word_embeddings": True}
    (path / "config.json").write_text(json.dumps(config))
    mx.random.seed(7)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    model.save_weights(str(path / "model.safetensors"))
    return load(str(path))


def prefer(tokenizer, *fragments: str, bonus: float = 30.0):
    """A logits processor for a model with strong opinions: it favours every token whose text
    contains one of `fragments` (and EOS), far above anything else."""
    import mlx.core as mx

    favoured = [i for i in range(len(tokenizer.vocab))
                if any(f in tokenizer.decode([i]) for f in fragments)]
    favoured += list(tokenizer.eos_token_ids)
    bias = mx.zeros((1035,)).at[mx.array(favoured)].add(bonus)
    return lambda tokens, logits: logits + bias


def generate(tiny, grammars, *, extra=None, max_tokens=MAX_TOKENS):
    """Greedy-decodes one sequence per grammar in one batch; returns (text, finish_reason,
    processor) for each."""
    from mlx_lm.generate import BatchGenerator

    model, tokenizer = tiny
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Answer in JSON."}], add_generation_prompt=True)
    processors = [make_processor(g, tokenizer) for g in grammars]
    generator = BatchGenerator(model, stop_tokens=[[t] for t in tokenizer.eos_token_ids])
    uids = generator.insert([prompt] * len(grammars), [max_tokens] * len(grammars),
                            logits_processors=[[*(extra or []), p] for p in processors])
    tokens = {uid: [] for uid in uids}
    finish = {}
    while responses := generator.next_generated():
        for r in responses:
            if r.finish_reason != "stop":
                tokens[r.uid].append(r.token)
            if r.finish_reason is not None:
                finish[r.uid] = r.finish_reason
    generator.close()
    return [(tokenizer.decode(tokens[u]), finish[u], p) for u, p in zip(uids, processors)]


def walk(grammar, tokenizer, text: str):
    """Feeds `text`'s tokens to a processor the way mlx-lm does; returns the processor and
    whether every token was allowed at its step."""
    import mlx.core as mx

    processor = make_processor(grammar, tokenizer)
    prompt = [1025, 1025]
    ids = tokenizer.encode(text, add_special_tokens=False)
    logits = mx.zeros((1, 1035))
    for n, token in enumerate(ids):
        allowed = processor(mx.array(prompt + ids[:n]), logits)
        if allowed[0, token].item() == float("-inf"):
            return processor, False
    processor(mx.array(prompt + ids), logits)
    return processor, True


def hermes_calls(text: str) -> list[dict]:
    assert re.fullmatch(r"<tool_call>\n.*\n</tool_call>(\n<tool_call>\n.*\n</tool_call>)*",
                        text, re.DOTALL), text
    return [json.loads(body) for body in
            re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.DOTALL)]


# ---- text.format ----------------------------------------------------------------------------

def test_json_schema_output_parses_and_validates(tiny):
    """json_schema output always parses and validates, for several schemas at once."""
    schemas = [PERSON, FLAGS, {"type": "object", "properties": {"items": {
        "type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9},
        "minItems": 2, "maxItems": 4}}, "required": ["items"], "additionalProperties": False}]
    grammars = [compile_text_format({"type": "json_schema", "name": f"s{i}", "schema": s,
                                     "strict": True}) for i, s in enumerate(schemas)]
    for (text, finish, processor), schema in zip(generate(tiny, grammars), schemas):
        assert finish == "stop" and processor.finished and processor.error is None, text
        assert conforms(json.loads(text), schema), text


def test_json_schema_beats_a_model_that_wants_to_stop(tiny):
    """A model that would end at once, or close brackets early, still writes valid JSON."""
    grammar = compile_text_format({"type": "json_schema", "name": "person", "schema": PERSON})
    [(text, finish, _)] = generate(tiny, [grammar], extra=[prefer(tiny[1], "}", "]")],
                                  max_tokens=128)
    assert finish == "stop", text
    assert conforms(json.loads(text), PERSON), text


def test_json_object_output_is_an_object(tiny):
    """json_object output parses to a dict, even from a model eager to end it."""
    grammar = compile_text_format({"type": "json_object"})
    [(text, finish, _)] = generate(tiny, [grammar], extra=[prefer(tiny[1], '"', "}")])
    assert finish == "stop"
    assert isinstance(json.loads(text), dict), text


def test_json_uses_the_templates_layout(tiny):
    """JSON comes out as `{"k": v, "k2": v2}`; other spacing is not allowed."""
    grammar = compile_text_format({"type": "json_schema", "name": "f", "schema": FLAGS})
    assert walk(grammar, tiny[1], '{"ok": true, "level": -3, "note": null}')[1]
    assert not walk(grammar, tiny[1], '{"ok":true, "level": -3, "note": null}')[1]
    assert not walk(grammar, tiny[1], '{\n  "ok": true, "level": -3, "note": null}')[1]


def test_text_format_text_needs_no_grammar():
    """`text` (and a missing type) compile to no grammar at all."""
    assert compile_text_format({"type": "text"}) is None
    assert compile_text_format({}) is None


def test_compiled_grammars_are_cached():
    """Compiling the same schema twice returns the same grammar object."""
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    assert compile_text_format(fmt) is compile_text_format(json.loads(json.dumps(fmt)))


def test_reasoning_runs_until_think_closes_when_the_prompt_opened_it(tiny):
    """in_reasoning: free reasoning up to `</think>`, then the JSON; otherwise the JSON
    starts at the first token and no `<think>` block is admitted."""
    fmt = {"type": "json_schema", "name": "f", "schema": FLAGS}
    doc = '{"ok": false, "level": 0, "note": "hi"}'
    thinking = compile_text_format(fmt, in_reasoning=True)
    assert walk(thinking, tiny[1], f"some thought\n</think>\n\n{doc}")[0].finished
    assert not walk(thinking, tiny[1], doc)[0].finished
    assert walk(compile_text_format(fmt), tiny[1], doc)[0].finished
    assert not walk(compile_text_format(fmt), tiny[1], f"<think>\nx\n</think>\n\n{doc}")[1]


# ---- invalid schemas ------------------------------------------------------------------------

@pytest.mark.parametrize("schema, fragment", [
    ({"type": "object", "properties": 5}, "properties must be an object"),
    ({"type": "frobnicate"}, "Invalid type: frobnicate"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not exist"),
    ({"type": "string", "format": "no-such-format"}, "Unknown format"),
])
def test_invalid_schema_is_rejected(schema, fragment):
    """A schema llguidance cannot compile is an InvalidSchema naming the problem."""
    with pytest.raises(InvalidSchema) as caught:
        compile_text_format({"type": "json_schema", "name": "bad", "schema": schema})
    assert fragment in caught.value.message
    assert "response_format 'bad'" in caught.value.message
    assert caught.value.param == "text.format.schema" and caught.value.status == 400


@pytest.mark.parametrize("schema, fragment", [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
     "In context=(), 'additionalProperties' is required to be supplied and to be false"),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
      "required": ["a"], "additionalProperties": False},
     "Missing 'b'"),
    ({"type": "object", "additionalProperties": False, "required": ["in"],
      "properties": {"in": {"type": "object", "properties": {}}}},
     "In context=('properties', 'in'), 'additionalProperties'"),
    ({"type": "array", "items": {"type": "string"}}, "must be a JSON Schema of 'type: \"object\"'"),
    ({"type": "object", "properties": 5, "additionalProperties": False},
     "properties must be an object"),
])
def test_strict_schema_follows_openai_rules(schema, fragment):
    """strict: true rejects open objects, optional properties and a non-object root."""
    with pytest.raises(InvalidSchema) as caught:
        compile_text_format({"type": "json_schema", "name": "s", "schema": schema,
                             "strict": True})
    assert fragment in caught.value.message


def test_non_strict_schema_may_be_open():
    """Without strict, optional properties and open objects are fine."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert compile_text_format({"type": "json_schema", "name": "s", "schema": schema})


@pytest.mark.parametrize("fmt, param", [
    ({"type": "json_schema", "schema": FLAGS}, "text.format.name"),
    ({"type": "json_schema", "name": "has space", "schema": FLAGS}, "text.format.name"),
    ({"type": "json_schema", "name": "s"}, "text.format.schema"),
    ({"type": "yaml"}, "text.format.type"),
])
def test_malformed_text_format_names_the_field(fmt, param):
    """A missing or malformed name, schema or type is a 400 pointing at that field."""
    with pytest.raises(InvalidSchema) as caught:
        compile_text_format(fmt)
    assert caught.value.param == param


# ---- tool calls -----------------------------------------------------------------------------

def test_named_tool_call_is_one_well_formed_call(tiny):
    """A forced named tool yields exactly one Hermes call to it, with valid arguments."""
    grammar = tool_call_grammar([ADD, WEATHER], "get_weather", parallel=False)
    [(text, finish, _)] = generate(tiny, [grammar])
    assert finish == "stop"
    [call] = hermes_calls(text)
    assert call["name"] == "get_weather"
    assert conforms(call["arguments"], WEATHER["parameters"]), text


def test_required_tool_call_picks_a_declared_tool(tiny):
    """tool_choice required calls a declared tool with valid arguments, even if the model balks."""
    grammar = tool_call_grammar([WEATHER, ADD], "required", parallel=False)
    [(text, finish, _)] = generate(tiny, [grammar], extra=[prefer(tiny[1], "}")])
    assert finish == "stop"
    [call] = hermes_calls(text)
    schema = {"get_weather": WEATHER["parameters"], "add": ADD["function"]["parameters"]}
    assert conforms(call["arguments"], schema[call["name"]]), text


def test_parallel_allows_several_calls_and_serial_exactly_one(tiny):
    """parallel admits newline-joined calls; without it a second call is refused."""
    one = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    two = one + "\n" + one.replace("1", "3")
    parallel = tool_call_grammar([WEATHER, ADD], "required", parallel=True)
    serial = tool_call_grammar([WEATHER, ADD], "required", parallel=False)
    assert walk(parallel, tiny[1], two)[0].finished
    assert walk(serial, tiny[1], one)[0].finished
    assert not walk(serial, tiny[1], two)[1]
    assert not walk(serial, tiny[1], "Sure! " + one)[1]


def test_tool_call_markers_are_the_tokenizers_single_tokens(tiny):
    """`<tool_call>` is emitted as the tokenizer's own marker token, as the model learned it."""
    tokenizer = tiny[1]
    processor = make_processor(tool_call_grammar([ADD], "add"), tokenizer)
    import mlx.core as mx

    allowed = processor(mx.array([1025]), mx.zeros((1, 1035)))
    [only] = [i for i in range(1035) if allowed[0, i].item() != float("-inf")]
    assert tokenizer.decode([only]) == "<tool_call>"


def test_unknown_named_tool_is_rejected():
    """Forcing a tool that is not in `tools` is a 400 on tool_choice."""
    with pytest.raises(InvalidRequest) as caught:
        tool_call_grammar([WEATHER], "nope")
    assert caught.value.param == "tool_choice"


def test_invalid_tool_parameters_name_the_tool():
    """A tool whose parameters cannot compile is a 400 naming that tool's position."""
    bad = {"type": "function", "name": "broken", "parameters": {"type": "object",
                                                                "properties": []}}
    with pytest.raises(InvalidSchema) as caught:
        tool_call_grammar([WEATHER, bad], "required")
    assert caught.value.param == "tools[1].parameters"
    assert "'broken'" in caught.value.message


def test_custom_tool_with_regex_format_constrains_its_input(tiny):
    """A custom tool's regex format becomes the pattern of its `input` argument."""
    tool = {"type": "custom", "name": "dial",
            "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]{3}-[0-9]{4}"}}
    grammar = tool_call_grammar([tool], "dial", parallel=False)
    [(text, finish, _)] = generate(tiny, [grammar])
    assert finish == "stop"
    [call] = hermes_calls(text)
    assert call["name"] == "dial"
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", call["arguments"]["input"]), text


@pytest.mark.parametrize("fmt, pattern", [
    ({"type": "grammar", "syntax": "lark",
      "definition": 'start: "add " NUM " " NUM\nNUM: /[0-9]{1,3}/'},
     r"add [0-9]{1,3} [0-9]{1,3}"),
    ({"type": "grammar", "syntax": "regex", "definition": r"(yes|no)!"}, r"(yes|no)!"),
])
def test_custom_tool_grammar_constrains_raw_text(tiny, fmt, pattern):
    """A custom tool's lark or regex grammar constrains raw output text."""
    [(text, finish, _)] = generate(tiny, [custom_tool_grammar(fmt)])
    assert finish == "stop"
    assert re.fullmatch(pattern, text), text


def test_invalid_custom_grammar_is_rejected():
    """A lark definition llguidance cannot parse is a 400 on the definition."""
    with pytest.raises(InvalidSchema) as caught:
        custom_tool_grammar({"type": "grammar", "syntax": "lark", "definition": "start: ???"},
                            param="tools[2].format")
    assert caught.value.param == "tools[2].format.definition"


# ---- the processor --------------------------------------------------------------------------

def test_rejected_token_steers_to_eos(tiny):
    """A token the grammar forbids is recorded as an error, and from then on only EOS is allowed."""
    import mlx.core as mx

    tokenizer = tiny[1]
    processor = make_processor(compile_text_format({"type": "json_object"}), tokenizer)
    logits = mx.zeros((1, 1035))
    processor(mx.array([1025]), logits)
    bad = tokenizer.encode("x", add_special_tokens=False)
    out = processor(mx.array([1025, *bad]), logits)
    assert processor.error
    assert [i for i in range(1035) if out[0, i].item() != float("-inf")] == \
        sorted(tokenizer.eos_token_ids)


def test_padded_output_layer_masks_the_padding(tiny):
    """Logits wider than the tokenizer's vocabulary (a padded output layer) keep the rest -inf."""
    import mlx.core as mx

    processor = make_processor(compile_text_format({"type": "json_object"}), tiny[1])
    out = processor(mx.array([1025]), mx.zeros((1, 1040)))
    assert out.shape == (1, 1040)
    assert all(out[0, i].item() == float("-inf") for i in range(1035, 1040))
