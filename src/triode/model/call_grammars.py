"""Forced tool calls in each format's own syntax: Lark rules for llguidance.

Each format's function here (named after it; a model family, `model/families`, names the one
it writes) takes `(calls, parallel)` and returns the expression of the calls part of a forced
turn, the rules it needs and the markers it names (`constraints.Grammar.markers`: strings
such as `<tool_call>` that a tokenizer may hold as one special token). `calls` are
(name, canonical JSON schema of the arguments) pairs; `constraints.tool_call_grammar` checks
them and wraps the result (reasoning first, the end of the turn after).

Every grammar writes what the format's parser reads back into exactly the arguments it
wrote (`tests/model/test_call_grammars.py` parses sampled calls with the parsers):

- Hermes (`<tool_call>` blocks of `{"name": ..., "arguments": ...}`, joined by a newline)
  and the other JSON formats (mistral, llama3, kimi_k2, kimi_k3's json block, muse_spark's values,
  pythonic's keyword values) embed llguidance's JSON schema grammar (`json_block`), in the
  layout the templates render (`JSON_LAYOUT`).
- XML-like formats with raw text values (glm47, laguna, longcat, minimax_m2, minicpm5,
  qwen3_coder) write a value as raw text where the format's parser keeps text as text (it
  decides by the property's schema, as mlx-lm's parsers do), else as JSON. Raw text holds no
  `<` (it would end the value), and where the parser strips whitespace it neither starts nor
  ends with any.
- Gemma 4 writes its own value syntax (bare keys, `<|"|>` strings), compiled from the schema
  here (`_Gemma4`); FunctionGemma only flat arguments (mlx-lm's parser reads no nesting).

Object properties are written in schema order, required ones always, optional ones maybe;
an object schema without `properties` takes any keys.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from .parsers.qwen3_coder import is_text


class Unsupported(ValueError):
    """A schema that a format's own syntax cannot carry (the request's 400 names the tool)."""


JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

Markers = tuple[tuple[str, str], ...]
Calls = tuple[tuple[str, str], ...]     # (tool name, canonical JSON schema of its arguments)
# A format's forced calls: (calls, parallel) -> (expression, rules, markers).
ForcedCalls = Callable[[Calls, bool], tuple[str, list[str], Markers]]

KEY = "/[A-Za-z_][A-Za-z0-9_]*/"
MAX_UNROLLED = 16   # list length bounds kept by unrolling the grammar this far
EMPTY = '""'


def json_block(schema: Any) -> str:
    """A `%json` block (llguidance's inline JSON schema) in the templates' layout."""
    body = schema if isinstance(schema, dict) else {}
    return "%json " + json.dumps({**body, "x-guidance": JSON_LAYOUT}, ensure_ascii=False)


def lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


class Rules:
    """Named rules for one grammar, with fresh names on demand."""

    def __init__(self, defs: dict[str, Any]):
        self.lines: list[str] = []
        self.defs = defs          # the arguments schema's $defs / definitions, for $ref
        self._count = 0

    def name(self, stem: str = "r") -> str:
        """A fresh rule name, for a rule that refers to itself."""
        self._count += 1
        return f"{stem}_{self._count}"

    def add(self, expression: str, stem: str = "r") -> str:
        name = self.name(stem)
        self.lines.append(f"{name}: {expression}")
        return name

    def json(self, schema: Any) -> str:
        """A JSON value of `schema`, with the root's definitions for its references."""
        if isinstance(schema, dict) and self.defs and "$ref" in json.dumps(schema):
            schema = {**schema, **self.defs}
        return json_block(schema)

    def resolve(self, schema: Any, depth: int = 0) -> dict[str, Any]:
        """`schema` with a local `$ref` followed (not through itself forever)."""
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and depth < 8:
            ref = schema["$ref"].split("/")
            target: Any = self.defs
            for part in ref[1:]:
                target = target.get(part) if isinstance(target, dict) else None
            if not isinstance(target, dict):
                return {}
            schema, depth = target, depth + 1
        return schema if isinstance(schema, dict) else {}


def root_defs(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: schema[k] for k in ("$defs", "definitions") if k in schema}


def properties(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]] | None:
    """(key, schema, required) in schema order; None for an object that takes any keys."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return None
    required: list[Any] = schema["required"] if isinstance(schema.get("required"), list) \
        else []
    return [(k, v if isinstance(v, dict) else {}, k in required) for k, v in props.items()]


def bounded_list(item: str, low: int, high: int | None, separator: str = ",") -> str:
    """`low` to `high` (None: any number of) `item`s joined by `separator`; a bound past
    MAX_UNROLLED items is not kept."""
    sep = lit(separator)
    if high is not None and high > MAX_UNROLLED:
        high = None
    low = min(low, MAX_UNROLLED)
    if high is not None and high < low:
        high = low
    head = [item] + [f"{sep} {item}"] * (low - 1) if low else []
    if high is None:
        tail = f"({sep} {item})*" if low else f"({item} ({sep} {item})*)?"
    else:
        tail = _optional_chain(item, sep, high - low, leading=bool(low))
    return " ".join(part for part in [*head, tail] if part) or EMPTY


def _optional_chain(item: str, sep: str, count: int, *, leading: bool) -> str:
    """Up to `count` more items, each optional after the one before."""
    chain = ""
    for n in reversed(range(count)):
        first = n == 0 and not leading
        chain = f"({'' if first else sep + ' '}{item}{' ' + chain if chain else ''})?"
    return chain


def separated(rules: Rules, items: list[tuple[str, bool]], separator: str) -> str:
    """Any subsequence of `items` (expression, required) that keeps the required ones, in
    order, joined by `separator`."""
    sep = lit(separator)
    first = rest = ""   # the rules for position i, before and after something was written
    for expression, required in reversed(items):
        tail = f" {rest}" if rest else ""
        new_rest = f"{sep} {expression}{tail}" if required else f"({sep} {expression})?{tail}"
        new_first = f"{expression}{tail}" if required else \
            f"{expression}{tail} | {first or EMPTY}"
        rest = rules.add(new_rest, "rest")
        first = rules.add(new_first, "first")
    return first or EMPTY


# ---- raw text values --------------------------------------------------------------------------

def raw_text(schema: dict[str, Any], *, strip: bool) -> str:
    """A string value written as text, in which `<` would end it; `strip`: the parser strips
    the value, so it neither starts nor ends with whitespace. Enums, `const` and lengths are
    kept; a pattern is used as it stands when it is anchored."""
    values = schema.get("enum") if isinstance(schema.get("enum"), list) else (
        [schema["const"]] if "const" in schema else None)
    if values is not None:
        texts = [v for v in values if isinstance(v, str) and "<" not in v
                 and (v == v.strip() or not strip)]
        if texts:
            return "(" + " | ".join(lit(t) for t in texts) + ")"
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and pattern.startswith("^") and pattern.endswith("$"):
        return "/" + pattern[1:-1].replace("/", "\\/") + "/"
    low: int = schema["minLength"] if isinstance(schema.get("minLength"), int) else 0
    high: int | None = schema["maxLength"] if isinstance(schema.get("maxLength"), int) else None
    if not strip:
        return f"/[^<]{{{low},{'' if high is None else high}}}/"
    if high == 0:
        return '""'
    edge, inner = r"[^<\s]", "[^<]"
    if high == 1:
        return f"/{edge}/" if low else f"/({edge})?/"
    middle = f"{inner}{{{max(low - 2, 0)},{'' if high is None else high - 2}}}{edge}"
    body = f"{edge}({middle})" + ("" if low >= 2 else "?")
    return f"/{body}/" if low else f"/({body})?/"


def _glm_value(rules: Rules, schema: dict[str, Any] | None) -> str:
    """GLM keeps a value as text where the schema's type is "string" (mlx-lm's glm47)."""
    if schema is None:
        return raw_text({}, strip=True)
    if schema.get("type") == "string":
        return raw_text(schema, strip=True)
    return rules.json(schema)


def _typed_value(rules: Rules, schema: dict[str, Any] | None) -> str:
    """MiniMax and MiniCPM convert a value by the types its schema allows, text last
    (mlx-lm's minimax_m2): text where "string" is one of them, else JSON."""
    from mlx_lm.tool_parsers.minimax_m2 import _extract_types_from_schema

    if schema is None or "string" in _extract_types_from_schema(rules.resolve(schema)):
        return raw_text(rules.resolve(schema) if schema else {}, strip=True)
    return rules.json(schema)


def _qwen3_coder_value(rules: Rules, schema: dict[str, Any] | None) -> str:
    """triode's Qwen3-Coder parser keeps text as text where the type is a string one."""
    if schema is None:
        return raw_text({}, strip=False)
    if is_text(schema):
        return raw_text(schema, strip=False)
    return rules.json(schema)


def xml_parameters(rules: Rules, schema: dict[str, Any],
                   value: Callable[[Rules, dict[str, Any] | None], str],
                   item: Callable[[str, str], str]) -> str:
    """The parameters of an XML-like call: `item(key, value)` for each, each item closing
    itself, so optional ones need no separator."""
    props = properties(schema)
    if props is None:
        return f"{rules.add(item(KEY, value(rules, None)), 'param')}*"
    parts = []
    for key, sub, required in props:
        name = rules.add(item(lit(key), value(rules, sub)), "param")
        parts.append(name if required else f"{name}?")
    return " ".join(parts) or '""'


# ---- the formats ------------------------------------------------------------------------------

def _most(calls: Calls, parallel: bool) -> int:
    """How many calls a forced turn may make: one, or with parallel calls as many as there
    are tools to choose from. Bounded, so that the turn ends: with no bound a model (random
    weights, a weak one) may write call after valid call until the token limit."""
    return len(calls) if parallel else 1


def _joined(call: str, most: int, separator: str = "") -> str:
    """`call`, then up to `most - 1` more, each after `separator`."""
    if most <= 1:
        return call
    sep = lit(separator) if separator else ""
    return f"{call} {_optional_chain(call, sep, most - 1, leading=True)}"


def _unique(calls: Calls, build: Callable[[str, dict[str, Any], Rules], str]
            ) -> tuple[str, list[str]]:
    """One alternative per tool, each built by `build(name, schema, rules)`, with rule names
    unique across tools."""
    lines: list[str] = []
    alternatives = []
    for i, (name, schema_text) in enumerate(calls):
        schema = json.loads(schema_text)
        rules = _PrefixedRules(root_defs(schema), f"t{i}")
        alternatives.append(rules.add(build(name, schema, rules), "tool"))
        lines += rules.lines
    return "(" + " | ".join(alternatives) + ")", lines


class _PrefixedRules(Rules):
    def __init__(self, defs: dict[str, Any], prefix: str):
        super().__init__(defs)
        self._prefix = prefix

    def name(self, stem: str = "r") -> str:
        return super().name(f"{self._prefix}_{stem}")


def _json_arguments(template: Callable[[str, str], str]) -> Callable[..., str]:
    """A format whose call is `template(name literal part, arguments JSON rule)`."""
    def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
        return template(name, rules.add(json_block(schema), "args"))
    return build


def hermes(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    """Hermes (the bundled model's): only `<tool_call>\\n{"name": ..., "arguments": ...}\\n
    </tool_call>` blocks, joined by a newline."""
    lines = ['call: m_call_open "\\n" (' + " | ".join(f"call_{i}" for i in range(len(calls)))
             + ') "\\n" m_call_close']
    for i, (name, schema) in enumerate(calls):
        head = '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '
        lines.append(f"call_{i}: {json.dumps(head)} args_{i} " + '"}"')
        lines.append(f"args_{i}: {json_block(json.loads(schema))}")
    return (_joined("call", _most(calls, parallel), "\n"), lines,
            (("m_call_open", "<tool_call>"), ("m_call_close", "</tool_call>")))


def glm_like(prefix: str) -> ForcedCalls:
    open_, close = f"<{prefix}tool_call>", f"</{prefix}tool_call>"
    markers: Markers = (("m_call_open", open_), ("m_call_close", close),
                        ("m_key_open", f"<{prefix}arg_key>"),
                        ("m_key_close", f"</{prefix}arg_key>"),
                        ("m_value_open", f"<{prefix}arg_value>"),
                        ("m_value_close", f"</{prefix}arg_value>"))

    def forced(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
        def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
            params = xml_parameters(
                rules, schema, _glm_value,
                lambda key, value: f'm_key_open {key} m_key_close "\\n" m_value_open {value} '
                                   'm_value_close "\\n"')
            return f'm_call_open {lit(name + chr(10))} {params} m_call_close'
        call, lines = _unique(calls, build)
        return _joined(call, _most(calls, parallel), "\n"), lines, markers
    return forced


def qwen3_coder(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
        params = xml_parameters(
            rules, schema, _qwen3_coder_value,
            lambda key, value: f'"<parameter=" {key} ">\\n" {value} "\\n</parameter>\\n"')
        return (f'm_call_open "\\n" {lit("<function=" + name + ">" + chr(10))} {params} '
                '"</function>\\n" m_call_close')
    call, lines = _unique(calls, build)
    return (_joined(call, _most(calls, parallel), "\n"), lines,
            (("m_call_open", "<tool_call>"), ("m_call_close", "</tool_call>")))


def minimax_m2(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
        params = xml_parameters(
            rules, schema, _typed_value,
            lambda key, value: f'"<parameter name=\\"" {key} "\\">" {value} "</parameter>\\n"')
        return f'{lit(f"<invoke name={json.dumps(name)}>" + chr(10))} {params} "</invoke>"'
    invoke, lines = _unique(calls, build)
    invokes = _joined(invoke, _most(calls, parallel), chr(10))
    return (f'm_call_open "\\n" {invokes} "\\n" m_call_close', lines,
            (("m_call_open", "<minimax:tool_call>"), ("m_call_close", "</minimax:tool_call>")))


def minicpm5(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
        params = xml_parameters(
            rules, schema, _typed_value,
            lambda key, value: f'"<param name=\\"" {key} "\\">" {value} "</param>"')
        return f'{lit(f"<function name={json.dumps(name)}>")} {params} "</function>"'
    call, lines = _unique(calls, build)
    return _joined(call, _most(calls, parallel), "\n"), lines, ()


def muse_spark(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
        params = xml_parameters(
            rules, schema, lambda r, s: r.json(s if s is not None else {}),
            lambda key, value: f'"<atem:parameter name=\\"" {key} "\\">" {value} '
                               '"</atem:parameter>\\n"')
        return (f'{lit(f"<atem:invoke name={json.dumps(name)}>" + chr(10))} {params} '
                '"</atem:invoke>"')
    invoke, lines = _unique(calls, build)
    invokes = _joined(invoke, _most(calls, parallel), chr(10))
    return (f'm_call_open "\\n" {invokes} "\\n" m_call_close', lines,
            (("m_call_open", "<atem:function_calls>"),
             ("m_call_close", "</atem:function_calls>")))


def kimi_k2(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    call, lines = _unique(calls, _json_arguments(
        lambda name, args: f'm_call_begin {lit("functions." + name + ":")} /[0-9]/ '
                           f'm_arguments_begin {args} m_call_end'))
    return (f"m_section_begin {_joined(call, _most(calls, parallel))} m_section_end", lines,
            (("m_section_begin", "<|tool_calls_section_begin|>"),
             ("m_section_end", "<|tool_calls_section_end|>"),
             ("m_call_begin", "<|tool_call_begin|>"),
             ("m_arguments_begin", "<|tool_call_argument_begin|>"),
             ("m_call_end", "<|tool_call_end|>")))


def kimi_k3(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    call, lines = _unique(calls, _json_arguments(
        lambda name, args: f'm_open {lit(f"call tool={json.dumps(name)} index=")} '
                           '/"[0-9]"/ m_sep m_open "json type=\\"object\\"" m_sep '
                           f'{args} m_close "json" m_sep m_close "call" m_sep'))
    joined = _joined(call, _most(calls, parallel))
    return (f'm_open "tools" m_sep {joined} m_close "tools" m_sep', lines,
            (("m_open", "<|open|>"), ("m_close", "<|close|>"), ("m_sep", "<|sep|>")))


def mistral(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    call, lines = _unique(calls, _json_arguments(
        lambda name, args: f"m_calls {lit(name)} m_args {args}"))
    return (_joined(call, _most(calls, parallel)), lines,
            (("m_calls", "[TOOL_CALLS]"), ("m_args", "[ARGS]")))


LLAMA3_HEAD = '{{"name": {}, "parameters": '


def llama3(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    call, lines = _unique(calls, _json_arguments(
        lambda name, args: f'{lit(LLAMA3_HEAD.format(json.dumps(name)))} {args} "}}"'))
    return _joined(call, _most(calls, parallel), "; "), lines, ()


def pythonic(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
        props = properties(schema)
        if props is None:
            pair = rules.add(f'{KEY} "=" {rules.json({})}', "kw")
            arguments = f'({pair} (", " {pair})*)?'
        else:
            arguments = separated(rules, [
                (rules.add(f'{lit(key + "=")} {rules.json(sub)}', "kw"), required)
                for key, sub, required in props], ", ")
        return f'{lit(name + "(")} {arguments} ")"'
    call, lines = _unique(calls, build)
    joined = _joined(call, _most(calls, parallel), ", ")
    return (f'm_call_open "[" {joined} "]" m_call_close', lines,
            (("m_call_open", "<|tool_call_start|>"), ("m_call_close", "<|tool_call_end|>")))


class _Gemma4:
    """Gemma 4's argument syntax from a JSON schema: `{key:value,...}`, strings between
    `<|"|>` (the rule `m_quote`), numbers, booleans and null as JSON, `[a,b]` lists."""

    def __init__(self, rules: Rules):
        self.rules = rules
        self._any: str | None = None

    def string(self, schema: dict[str, Any]) -> str:
        return f"m_quote {raw_text(schema, strip=False)} m_quote"

    def any(self) -> str:
        if self._any is None:
            rules = self.rules
            self._any = rules.name("g4_any")
            string = self.string({})
            scalar = json_block({"type": ["number", "boolean", "null"]})
            pair = rules.add(f'{KEY} ":" {self._any}', "g4_pair")
            rules.lines.append(
                f'{self._any}: {string} | {scalar} | "{{" ({pair} ("," {pair})*)? "}}" '
                f'| "[" ({self._any} ("," {self._any})*)? "]"')
        return self._any

    def value(self, schema: Any, depth: int = 0) -> str:
        schema = self.rules.resolve(schema)
        if depth > 8:
            return self.any()
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return "(" + " | ".join(self.value(s, depth + 1) for s in schema[key]) + ")"
        values = schema.get("enum") if isinstance(schema.get("enum"), list) else (
            [schema["const"]] if "const" in schema else None)
        if values is not None:
            return "(" + " | ".join(self.literal(v) for v in values) + ")"
        kind = schema.get("type")
        if isinstance(kind, list):
            return "(" + " | ".join(self.value({**schema, "type": k}, depth + 1)
                                    for k in kind) + ")"
        if kind == "string":
            return self.string(schema)
        if kind in ("integer", "number", "boolean", "null"):
            return json_block(schema)
        if kind == "array":
            item = self.rules.add(self.value(schema.get("items", {}), depth + 1), "g4_item")
            low = schema.get("minItems") if isinstance(schema.get("minItems"), int) else 0
            high = schema.get("maxItems") if isinstance(schema.get("maxItems"), int) else None
            return f'"[" {bounded_list(item, low, high)} "]"'
        if kind == "object" or "properties" in schema:
            return self.object(schema, depth)
        return self.any()

    def object(self, schema: dict[str, Any], depth: int = 0) -> str:
        props = properties(schema)
        if props is None:
            pair = self.rules.add(f'{KEY} ":" {self.any()}', "g4_pair")
            return f'"{{" ({pair} ("," {pair})*)? "}}"'
        members = separated(self.rules, [
            (self.rules.add(f'{lit(key + ":")} {self.value(sub, depth + 1)}', "g4_member"),
             required) for key, sub, required in props], ",")
        return f'"{{" {members} "}}"'

    def literal(self, value: Any) -> str:
        if isinstance(value, str):
            return f"m_quote {lit(value)} m_quote"
        if isinstance(value, dict):
            inner = ' "," '.join(f'{lit(str(k) + ":")} {self.literal(v)}' for k, v in value.items())
            return f'"{{" {inner} "}}"'
        if isinstance(value, list):
            inner = ' "," '.join(self.literal(v) for v in value)
            return f'"[" {inner} "]"'
        return lit(json.dumps(value))


def _plain_name(name: str, pattern: str, fmt: str) -> None:
    """Gemma's parsers read a call's name as `[\\w-]+` (FunctionGemma's `\\w+`): a namespaced
    `ns.name` would come back as `ns`."""
    if not re.fullmatch(pattern, name):
        raise Unsupported(f"{fmt}'s call syntax cannot carry the tool name {name!r}")


def gemma4(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
        _plain_name(name, r"[\w-]+", "Gemma 4")
        return f'm_call_open {lit("call:" + name)} {_Gemma4(rules).object(schema)} m_call_close'
    call, lines = _unique(calls, build)
    return (_joined(call, _most(calls, parallel)), lines,
            (("m_call_open", "<|tool_call>"), ("m_call_close", "<tool_call|>"),
             ("m_quote", '<|"|>')))


def _fg_json_string(schema: dict[str, Any]) -> str:
    """A JSON string inside a FunctionGemma list: nothing that needs escaping, no `,` or `}`."""
    low = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
    high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else ""
    return f'"\\"" /[^,}}"\\\\<\\x00-\\x1f]{{{low},{high}}}/ "\\""'


def function_gemma(calls: Calls, parallel: bool) -> tuple[str, list[str], Markers]:
    """Flat arguments only: mlx-lm's parser ends the arguments at the first `}` and a value
    at the next `,`, so an object is refused and a list holds at most one item."""
    def value(rules: Rules, schema: dict[str, Any]) -> str:
        schema = rules.resolve(schema)
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            raise Unsupported("FunctionGemma's call syntax has no nested objects")
        if kind == "array":
            if schema.get("minItems", 0) > 1:
                raise Unsupported("FunctionGemma's call syntax holds at most one list item")
            item = rules.resolve(schema.get("items", {}))
            if item.get("type") in ("object", "array"):
                raise Unsupported("FunctionGemma's call syntax has no nested values")
            one = _fg_json_string(item) if item.get("type") in ("string", None) \
                else rules.json(item)
            return f'"[" {one} "]"' if schema.get("minItems", 0) else f'"[" ({one})? "]"'
        if kind is None or is_text(schema):
            text = raw_text(schema, strip=False).replace("[^<]", "[^<}]")
            return f"m_escape {text} m_escape"
        return rules.json(schema)

    def build(name: str, schema: dict[str, Any], rules: Rules) -> str:
        _plain_name(name, r"\w+", "FunctionGemma")
        props = properties(schema)
        if props is None:
            pair = rules.add(f'{KEY} ":" {value(rules, {"type": "string"})}', "pair")
            members = f'({pair} ("," {pair})*)?'
        else:
            members = separated(rules, [
                (rules.add(f'{lit(key + ":")} {value(rules, sub)}', "member"), required)
                for key, sub, required in props], ",")
        return f'm_call_open {lit("call:" + name + "{")} {members} "}}" m_call_close'
    call, lines = _unique(calls, build)
    return (_joined(call, _most(calls, parallel)), lines,
            (("m_call_open", "<start_function_call>"), ("m_call_close", "<end_function_call>"),
             ("m_escape", "<escape>")))
