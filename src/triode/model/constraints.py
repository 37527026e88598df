"""Structured output and forced tool calls, enforced by constrained decoding (llguidance).

Two halves, split along the thread boundary:

- `compile_text_format`, `tool_call_grammar` and `custom_tool_grammar` (and their harmony
  forms for gpt-oss, `harmony_text_format_grammar`, `harmony_tool_call_grammar`) run at
  request time on the trio side. They check the request (an unusable schema is a 400 before
  anything is queued) and return a `Grammar`: plain data, independent of any tokenizer,
  cached. Which of them a request gets, in which syntax, is its model family's choice
  (`model/families`).
- `make_processor(grammar, tokenizer)` runs on the engine thread when a sequence is inserted.
  It returns a `ConstrainedProcessor`, an mlx-lm logits processor that owns one llguidance
  matcher: each step it feeds the matcher the token sampled last and sets every token the
  grammar forbids to -inf, so the sampler can only pick a token that keeps the output valid.

JSON is generated in one fixed layout, `{"a": 1, "b": [2, 3]}` (Python's `json.dumps` and the
chat template's `tojson`). Free whitespace would let a small model pad forever with newlines,
a well-known failure of constrained JSON, and this is the layout the model saw in training.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import weakref
from typing import Any, Iterator, Mapping, Sequence

import attrs
import llguidance
import numpy as np

from ..errors import InvalidRequest
from . import harmony
from . import call_grammars
from .call_grammars import ForcedCalls, json_block

log = logging.getLogger(__name__)

# The reasoning block, as the bundled chat template renders it.
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# What a custom tool's call carries in the Hermes format: its raw input under "input".
CUSTOM_TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
    "additionalProperties": False,
}

_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_CACHE_SIZE = 256


class InvalidSchema(InvalidRequest):
    """A schema or grammar in the request that cannot be enforced (HTTP 400)."""

    code = "invalid_json_schema"

    def __init__(self, message: str, param: str | None = "text.format.schema"):
        super().__init__(message, param=param)


@attrs.frozen
class Grammar:
    """A checked constraint, not yet bound to a tokenizer.

    `lark` is an llguidance Lark grammar that may reference `markers`: (rule, text) pairs for
    strings like `<tool_call>` that a model's tokenizer usually holds as one special token.
    llguidance only lets such a token through where the grammar names it as a token, so
    each marker rule is defined once the tokenizer is known (`_bind`)."""

    lark: str
    markers: tuple[tuple[str, str], ...] = ()


# ---- text.format ----------------------------------------------------------------------------

def compile_text_format(fmt: Mapping[str, Any], *, in_reasoning: bool = False,
                        think_close: str = THINK_CLOSE) -> Grammar | None:
    """The grammar for a `text.format` object; None for plain `text`. The JSON is the
    reply's text in every tool-call format.

    `in_reasoning`: the prompt already opened `<think>`; reasoning runs until `</think>`
    (`think_close`: the model's own closing marker), then the JSON. Otherwise the JSON starts
    at the first token."""
    kind = fmt.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return _json_grammar(_canonical({"type": "object"}), in_reasoning, think_close)
    if kind != "json_schema":
        raise InvalidSchema(f"Invalid value for 'text.format.type': {kind!r}; expected one of "
                            "'text', 'json_schema', 'json_object'", param="text.format.type")
    name = fmt.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidSchema("'text.format.name' is required: 1 to 64 characters from a-z, A-Z, "
                            "0-9, '_' and '-'", param="text.format.name")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise InvalidSchema(f"Invalid schema for response_format '{name}': "
                            "'text.format.schema' must be a JSON object")
    if fmt.get("strict") is True:
        check_strict_schema(schema, what=f"response_format '{name}'")
    try:
        return _json_grammar(_canonical(schema), in_reasoning, think_close)
    except ValueError as e:
        raise InvalidSchema(f"Invalid schema for response_format '{name}': {e}") from None


def check_strict_schema(schema: Mapping[str, Any], *, what: str,
                        param: str = "text.format.schema") -> None:
    """OpenAI's structural rules for `strict: true`: the root is an object, and every object
    sets `additionalProperties: false` and lists all of its properties in `required`.
    The messages follow OpenAI's wording so clients see familiar errors."""
    if schema.get("type") != "object":
        raise InvalidSchema(f"Invalid schema for {what}: schema must be a JSON Schema of "
                            "'type: \"object\"', got 'type: "
                            f"\"{schema.get('type')}\"'.", param=param)
    for context, node in _subschemas(schema, ()):
        if not _is_object_schema(node):
            continue
        where = f"Invalid schema for {what}: In context={context!r}, "
        if node.get("additionalProperties", True) is not False:
            raise InvalidSchema(where + "'additionalProperties' is required to be supplied "
                                "and to be false.", param=param)
        properties = node.get("properties")
        properties = properties if isinstance(properties, dict) else {}  # llguidance says why
        required = node.get("required", [])
        missing = [k for k in properties if not isinstance(required, list) or k not in required]
        if missing:
            raise InvalidSchema(where + "'required' is required to be supplied and to be an "
                                "array including every key in properties. Missing "
                                f"'{missing[0]}'.", param=param)


def _subschemas(node: Any, context: tuple[Any, ...]
                ) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every schema object under `node`, with the JSON path that leads to it."""
    if not isinstance(node, dict):
        return
    yield context, node
    for key in ("properties", "$defs", "definitions"):
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                yield from _subschemas(sub, context + (key, name))
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                yield from _subschemas(sub, context + (key, i))
    for key in ("items", "additionalProperties", "not"):
        yield from _subschemas(node.get(key), context + (key,))


def _is_object_schema(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or (
        kind is None and "properties" in node)


def _canonical(schema: Any) -> str:
    # Key order is kept: llguidance emits properties in schema order, so two schemas that
    # differ only in order are different grammars.
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _json_grammar(canonical_schema: str, in_reasoning: bool,
                  think_close: str = THINK_CLOSE) -> Grammar:
    """Raises ValueError with llguidance's explanation when the schema can't be compiled."""
    body = f"start: {_THINK_PREFIX if in_reasoning else ''}json_body\n"
    body += f"json_body: {json_block(json.loads(canonical_schema))}\n"
    return _checked(Grammar(body + (_THINK_RULE if in_reasoning else ""),
                            _think_markers(think_close) if in_reasoning else ()))


_THINK_PREFIX = "think "
# For a prompt that already opened `<think>` (a template with thinking on): free reasoning
# text up to the first `</think>`, then the constrained part. The reasoning text cannot
# contain the closing marker when that is a special token, so the first `</think>` ends it.
_THINK_RULE = 'think: /(.|\\n)*/ m_think_close "\\n\\n"\n'


def _think_markers(think_close: str) -> tuple[tuple[str, str], ...]:
    return (("m_think_close", think_close),)


# ---- tool calls -----------------------------------------------------------------------------

def tool_arguments_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema of a tool's `arguments` in a Hermes call. Function tools come in the
    flat Responses shape or the nested Chat shape; a custom tool takes `{"input": str}`,
    with a `regex` format becoming the string's pattern (a Lark format cannot be expressed
    inside a JSON string, so that input is left free)."""
    if tool.get("type") == "custom":
        fmt = tool.get("format") or {}
        if fmt.get("type") == "grammar" and fmt.get("syntax") == "regex":
            pattern = {"type": "string", "pattern": f"^(?:{fmt.get('definition', '')})$"}
            return {**CUSTOM_TOOL_PARAMETERS, "properties": {"input": pattern}}
        return CUSTOM_TOOL_PARAMETERS
    function = tool.get("function", tool)
    parameters = function.get("parameters")
    return parameters if isinstance(parameters, dict) else {"type": "object"}


def tool_name(tool: Mapping[str, Any]) -> str:
    return str(tool.get("function", tool).get("name", ""))


def tool_call_grammar(tools: Sequence[Mapping[str, Any]], mode: str = "required", *,
                      parallel: bool = True, in_reasoning: bool = False,
                      forced: ForcedCalls = call_grammars.hermes,
                      think_close: str = THINK_CLOSE) -> Grammar:
    """Forced tool calls written by `forced` (a model family's syntax, `call_grammars`;
    Hermes by default), then the end of the turn.

    `mode` is "required" (any of `tools`) or the name of the one tool to call, once.
    `parallel` allows `required` as many calls as there are tools; without it there is
    exactly one. `tools` are as rendered to the model; an error's `param` is `tools[i]...`
    by position in this list."""
    names = [tool_name(t) for t in tools]
    if mode == "required":
        chosen = list(range(len(tools)))
    elif mode in names:
        chosen = [names.index(mode)]
    else:
        raise InvalidRequest(f"Tool choice '{mode}' not found in 'tools' parameter.",
                             param="tool_choice")
    if not chosen:
        raise InvalidRequest("tool_choice 'required' needs at least one tool in 'tools'",
                             param="tool_choice")
    for i in chosen:
        if not isinstance(names[i], str) or not names[i]:
            raise InvalidRequest("every tool needs a non-empty 'name'", param=f"tools[{i}].name")
    calls = tuple((names[i], _canonical(tool_arguments_schema(tools[i]))) for i in chosen)
    # A named tool_choice is one call of that tool, parallel calls or not; `required` with
    # parallel calls is at most as many calls as tools (call_grammars._most). Then the turn
    # ends: the grammar is complete and only EOS remains.
    parallel = parallel and mode == "required"
    try:
        return _tool_grammar(calls, parallel, in_reasoning, forced, think_close)
    except _ToolSchemaError as e:
        i = chosen[e.index]
        param = "format" if tools[i].get("type") == "custom" else "parameters"
        raise InvalidSchema(f"Invalid schema for tool '{names[i]}': {e.reason}",
                            param=f"tools[{i}].{param}") from None


class _ToolSchemaError(ValueError):
    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index, self.reason = index, reason


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _tool_grammar(calls: tuple[tuple[str, str], ...], parallel: bool, in_reasoning: bool,
                  forced: ForcedCalls, think_close: str = THINK_CLOSE) -> Grammar:
    for i, (_, schema) in enumerate(calls):
        try:  # checked one by one so an error names its tool
            _json_grammar(schema, False)
        except ValueError as e:
            raise _ToolSchemaError(i, str(e)) from None
    try:   # a schema the format's own syntax cannot express is the request's error
        expression, lines, markers = forced(calls, parallel)
        lines = [f"start: {_THINK_PREFIX if in_reasoning else ''}{expression}", *lines]
        if in_reasoning:
            lines.append(_THINK_RULE)
            markers += _think_markers(think_close)
        return _checked(Grammar("\n".join(lines) + "\n", markers))
    except ValueError as e:
        raise _ToolSchemaError(_failing_call(forced, calls), str(e)) from None


def _failing_call(forced: ForcedCalls, calls: tuple[tuple[str, str], ...]) -> int:
    """The first of `calls` whose grammar in `forced`'s syntax does not compile on its own."""
    for i, call in enumerate(calls):
        try:
            expression, lines, markers = forced((call,), False)
            _checked(Grammar("\n".join([f"start: {expression}", *lines]) + "\n", markers))
        except ValueError:
            return i
    return 0


# ---- harmony (gpt-oss) ----------------------------------------------------------------------
# The output starts after the prompt's `<|start|>assistant`. The constrained message may
# follow an analysis message (gpt-oss reasons before it acts), capped at `analysis_tokens` so
# that the constrained part always comes. The grammar ends on harmony's own stop token
# (`<|call|>` after a call, `<|return|>` after the answer), so a forced turn ends as harmony
# says and re-renders token for token.

HARMONY_ANALYSIS_TOKENS = 1024   # the cap without max_output_tokens (half of it with one)
_HARMONY_MARKERS = (("m_h_channel", harmony.CHANNEL), ("m_h_message", harmony.MESSAGE),
                    ("m_h_end", harmony.END), ("m_h_start", harmony.START),
                    ("m_h_constrain", harmony.CONSTRAIN), ("m_h_call", harmony.CALL),
                    ("m_h_return", harmony.RETURN))


def harmony_analysis_tokens(max_output_tokens: int | None) -> int:
    """The analysis a constrained harmony turn may write: half the output limit at most."""
    if max_output_tokens is None:
        return HARMONY_ANALYSIS_TOKENS
    return min(HARMONY_ANALYSIS_TOKENS, max_output_tokens // 2)


def _harmony_analysis(tokens: int) -> tuple[str, str]:
    """(the prefix of `start`, the rules it needs): an optional capped analysis message."""
    if tokens < 1:
        return "", ""
    return "analysis? ", (
        'analysis: m_h_channel "analysis" m_h_message analysis_text m_h_end m_h_start '
        '"assistant"\n'
        f"analysis_text[max_tokens={tokens}]: /(.|\\n)*/\n")


def harmony_tool_call_grammar(tools: Sequence[Mapping[str, Any]], mode: str = "required", *,
                              analysis_tokens: int = HARMONY_ANALYSIS_TOKENS) -> Grammar:
    """Forced calls in harmony: an optional analysis message, then one call
    `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{arguments}<|call|>`,
    as `harmony.call_header` renders it. One call only: `<|call|>` ends the generation.
    Checks and errors are `tool_call_grammar`'s."""
    tool_call_grammar(tools, mode, parallel=False)
    names = [tool_name(t) for t in tools]
    chosen = range(len(tools)) if mode == "required" else [names.index(mode)]
    return _harmony_tool_grammar(tuple(
        (harmony.recipient(names[i]), _canonical(tool_arguments_schema(tools[i])))
        for i in chosen), analysis_tokens)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _harmony_tool_grammar(calls: tuple[tuple[str, str], ...], analysis_tokens: int) -> Grammar:
    prefix, analysis = _harmony_analysis(analysis_tokens)
    rules = [f"start: {prefix}call",
             'call: m_h_channel "commentary to=" ('
             + " | ".join(f"call_{i}" for i in range(len(calls))) + ")"]
    for i, (to, schema) in enumerate(calls):
        rules.append(f"call_{i}: {json.dumps(to + ' ')} m_h_constrain \"json\" m_h_message "
                     f"args_{i} m_h_call")
        rules.append(f"args_{i}: {json_block(json.loads(schema))}")
    return _checked(Grammar("\n".join(rules) + "\n" + analysis, _HARMONY_MARKERS))


def harmony_text_format_grammar(fmt: Mapping[str, Any], *,
                                analysis_tokens: int = HARMONY_ANALYSIS_TOKENS
                                ) -> Grammar | None:
    """Structured output in harmony: an optional analysis message, then the JSON as the
    `final` message. Checks and errors are `compile_text_format`'s; None for plain text."""
    if compile_text_format(fmt) is None:
        return None
    schema = fmt.get("schema") if fmt.get("type") == "json_schema" else {"type": "object"}
    return _harmony_json_grammar(_canonical(schema), analysis_tokens)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _harmony_json_grammar(canonical_schema: str, analysis_tokens: int) -> Grammar:
    prefix, analysis = _harmony_analysis(analysis_tokens)
    body = (f'start: {prefix}m_h_channel "final" m_h_message json_body m_h_return\n'
            f"json_body: {json_block(json.loads(canonical_schema))}\n")
    return _checked(Grammar(body + analysis, _HARMONY_MARKERS))


def custom_tool_grammar(fmt: Mapping[str, Any], *, param: str = "tools[0].format") -> Grammar:
    """The raw input of a custom tool with a `{"type": "grammar", "syntax": "lark"|"regex",
    "definition": ...}` format, for when the model writes the input itself (not inside a
    JSON string). A Lark definition must have a `start` rule."""
    syntax, definition = fmt.get("syntax"), fmt.get("definition")
    if fmt.get("type") != "grammar" or syntax not in ("lark", "regex"):
        raise InvalidSchema("a custom tool format must be {'type': 'grammar', 'syntax': "
                            "'lark' or 'regex', 'definition': ...}", param=param)
    if not isinstance(definition, str):
        raise InvalidSchema("the grammar 'definition' must be a string",
                            param=f"{param}.definition")
    lark = definition if syntax == "lark" else f"start: /{llguidance.regex_to_lark(definition)}/\n"
    try:
        return _checked(Grammar(lark))
    except ValueError as e:
        raise InvalidSchema(f"Invalid {syntax} grammar: {e}", param=f"{param}.definition") from None


def _checked(grammar: Grammar) -> Grammar:
    """Validates with every marker as plain text (the request side has no tokenizer)."""
    error = llguidance.LLMatcher.validate_grammar(_bind(grammar, None))
    if error:
        raise ValueError(error.strip())
    return grammar


def _bind(grammar: Grammar, tokenizer: llguidance.LLTokenizer | None) -> str:
    """The llguidance grammar for one tokenizer: a marker that this tokenizer holds as a
    single special token is referenced as that token, any other as its text."""
    defs = []
    for rule, text in grammar.markers:
        ids = tokenizer.tokenize_str(text) if tokenizer is not None else []
        single = len(ids) == 1 and tokenizer is not None and tokenizer.is_special_token(ids[0])
        # By id: a token's own text is Lark syntax only when it reads `<...>` ([TOOL_CALLS]).
        defs.append(f"{rule}: {f'<[{ids[0]}]>' if single else json.dumps(text)}")
    return llguidance.LLMatcher.grammar_from_lark(grammar.lark + "".join(d + "\n" for d in defs))


# ---- the engine side ------------------------------------------------------------------------

_ll_tokenizers: weakref.WeakKeyDictionary[Any, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()


def ll_tokenizer(tokenizer: Any) -> llguidance.LLTokenizer:
    """llguidance's view of an mlx-lm `TokenizerWrapper` (or a Hugging Face fast tokenizer),
    built once per tokenizer: it indexes the whole vocabulary."""
    try:
        return _ll_tokenizers[tokenizer]
    except KeyError:
        pass
    import llguidance.hf

    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    eos = sorted(getattr(tokenizer, "eos_token_ids", None) or [hf.eos_token_id])
    built = llguidance.hf.from_tokenizer(hf, eos_token=eos)
    _ll_tokenizers[tokenizer] = built
    return built


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _template_matcher(grammar: Grammar, tokenizer: llguidance.LLTokenizer) -> llguidance.LLMatcher:
    # Building a matcher builds its lexer, and its first mask fills lexer caches that copies
    # share; doing both once here leaves each request a copy at a couple of microseconds.
    matcher = llguidance.LLMatcher(tokenizer, _bind(grammar, tokenizer), log_level=0)
    matcher.compute_bitmask()
    if matcher.is_error():
        raise ValueError(f"grammar does not work with this tokenizer: {matcher.get_error()}")
    return matcher


class ConstrainedProcessor:
    """An mlx-lm logits processor that keeps one sequence inside a grammar.

    mlx-lm calls it once per decode step with the sequence's tokens so far (the prompt, then
    everything sampled) and that step's logits `[1, vocab]`. The first call sees only the
    prompt; each later call sees one more token, the one sampled last, which is fed to the
    matcher before the mask for the next token is computed. Once the grammar is complete
    only EOS remains. A token the grammar rejects (a sampler that ignored the mask) is
    recorded in `error` and the sequence is steered to EOS rather than crashing the batch.
    """

    def __init__(self, grammar: Grammar, tokenizer: Any):
        self._tokenizer = ll_tokenizer(tokenizer)
        self._matcher = _template_matcher(grammar, self._tokenizer).deep_copy()
        self._vocab = self._tokenizer.vocab_size
        self._bitmask = np.zeros((self._vocab + 31) // 32, dtype=np.int32)
        self._prompt_length: int | None = None
        self._consumed = 0
        self.error: str | None = None

    @property
    def finished(self) -> bool:
        """The output so far is a complete sentence of the grammar."""
        return self._matcher.is_accepting()

    def __call__(self, tokens: Any, logits: Any) -> Any:
        import mlx.core as mx

        self._advance(tokens)
        allowed = self.allowed_tokens(logits.shape[-1])
        return mx.where(mx.array(allowed), logits, mx.array(-mx.inf, dtype=logits.dtype))

    def _advance(self, tokens: Any) -> None:
        length = tokens.shape[0]
        if self._prompt_length is None:
            self._prompt_length = length
            return
        start = self._prompt_length + self._consumed
        if length <= start:
            return
        new = tokens[start:length].tolist()
        self._consumed += len(new)
        for token in new:
            # A stopped matcher has only let EOS through; mlx-lm still runs one step past
            # the EOS that ends the sequence, which is nothing to feed back.
            if self.error is not None or self._matcher.is_stopped():
                break
            if not self._matcher.consume_token(token):
                self.error = self._matcher.get_error() or f"token {token} rejected by the grammar"
                log.warning("constrained decoding: %s", self.error)

    def allowed_tokens(self, width: int) -> np.ndarray:
        """A boolean mask of `width` entries: the tokens the grammar allows next."""
        if self.error is None:
            self._matcher.unsafe_compute_mask_ptr(self._bitmask.ctypes.data,
                                                  self._bitmask.nbytes)
            if self._matcher.is_error():  # a parser limit hit mid-output: the mask is empty
                self.error = self._matcher.get_error()
                log.warning("constrained decoding: %s", self.error)
        if self.error is not None:
            allowed = np.zeros(width, dtype=bool)
            allowed[[t for t in self._tokenizer.eos_tokens if t < width]] = True
            return allowed
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")[:self._vocab]
        if width == self._vocab:
            return bits.astype(bool)
        # The model's output layer can be padded past the tokenizer's vocabulary.
        allowed = np.zeros(width, dtype=bool)
        allowed[:min(width, self._vocab)] = bits[:width]
        return allowed


def make_processor(grammar: Grammar, tokenizer: Any) -> ConstrainedProcessor:
    """A fresh per-sequence processor; call on the engine thread at insert time."""
    return ConstrainedProcessor(grammar, tokenizer)
