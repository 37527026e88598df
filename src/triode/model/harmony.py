"""OpenAI's harmony format (gpt-oss): the prompt a conversation renders to.

gpt-oss models read and write harmony: messages `<|start|>{header}<|message|>{content}<|end|>`
whose header names the role, a channel (`analysis` for the chain of thought, `commentary`
for tool calls and preambles, `final` for the answer) and, for a call, its recipient
(`to=functions.NAME`) and content type (`<|constrain|>json`). Generation stops at `<|return|>`
(the answer is done) or `<|call|>` (a tool is to be called).

This renders the prompt itself rather than running the model's Jinja template, following
openai-harmony's renderer (github.com/openai/harmony, `src/encoding.rs`) and its format guide
(`docs/format.md`). openai-harmony is not used: its wheel does not ship the o200k vocabulary
its encoding loads (`load_harmony_encoding` downloads `o200k_base.tiktoken` and checks its
hash, so it cannot start offline), and its token ids are o200k's where triode tokenizes with
the model directory's own tokenizer anyway. Rendering here gives the text, which that
tokenizer encodes (its special tokens are the harmony markers).

Where this departs from the model's own template (and why):

- Calls render as the model writes them (`<|channel|>commentary to=functions.NAME
  <|constrain|>json`, the format guide's example output, which the forced-call grammar also
  produces), so an agent loop's next prompt extends the last one token for token and the
  prompt cache matches through the call.
- Analysis is kept on assistant turns that call tools and dropped from turns that ended in a
  final answer (the format guide's rule, which gpt-oss's own template applies per message):
  a turn renders the same whatever follows it, so each prompt extends the previous one.
- No `Current date:` line unless `conversation_start_date` is given: a date that changes at
  midnight would invalidate every cached prompt.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

START, END, MESSAGE, CHANNEL = "<|start|>", "<|end|>", "<|message|>", "<|channel|>"
CONSTRAIN, RETURN, CALL = "<|constrain|>", "<|return|>", "<|call|>"
# The tokens that end generation: an answer that is done, a call to be made.
STOP_MARKERS = (RETURN, CALL)
MARKERS = (START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL)

MODEL_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
KNOWLEDGE_CUTOFF = "2024-06"
FUNCTIONS = "functions"
# OpenAI's reasoning efforts → the three levels gpt-oss was trained with.
EFFORTS = {"none": "low", "minimal": "low", "low": "low", "medium": "medium", "high": "high",
           "xhigh": "high"}
DEFAULT_EFFORT = "medium"


def recipient(chat_name: str) -> str:
    """The recipient a call to the tool named `chat_name` goes to: `functions.NAME`, or
    `NS.NAME` for a namespaced tool (which harmony declares as a namespace of its own)."""
    return chat_name if "." in chat_name else f"{FUNCTIONS}.{chat_name}"


def tool_name(call_recipient: str) -> str:
    """The tool a recipient names, as the tools were declared (`recipient`'s inverse)."""
    prefix = FUNCTIONS + "."
    return call_recipient[len(prefix):] if call_recipient.startswith(prefix) else call_recipient


def call_header(call_recipient: str) -> str:
    """What follows `<|start|>assistant` in a call message, up to `<|message|>`."""
    return f"{CHANNEL}commentary to={call_recipient} {CONSTRAIN}json"


def render(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
           *, reasoning_effort: str | None = None, model_identity: str | None = None,
           conversation_start_date: str | None = None, **_ignored: Any) -> str:
    """The prompt for the assistant's next turn: chat-template messages (`items.chat_messages`)
    and tools (`{"type": "function", "function": {...}}`) in harmony, ending `<|start|>assistant`.

    Leading system and developer messages become the developer message's instructions; later
    ones are developer messages where they stand. Keyword arguments are the chat template's
    (`chat_template_kwargs`, `reasoning_effort` from the request); others are ignored."""
    functions = [t.get("function", t) for t in tools or ()]
    has_functions = any(recipient(str(f.get("name", ""))).startswith(FUNCTIONS + ".")
                        for f in functions)
    out = [_system_message(EFFORTS.get(str(reasoning_effort), DEFAULT_EFFORT), has_functions,
                           model_identity or MODEL_IDENTITY, conversation_start_date)]
    leading = 0
    while leading < len(messages) and messages[leading].get("role") in ("system", "developer"):
        leading += 1
    instructions = "\n\n".join(_text(m.get("content")) for m in messages[:leading])
    developer = _developer_content(instructions, functions)
    if developer:
        out.append(_message("developer", developer))
    names: dict[str, str] = {}   # call id → the recipient its output comes from
    for message in messages[leading:]:
        role = message.get("role")
        if role in ("system", "developer"):
            out.append(_message("developer", _text(message.get("content"))))
        elif role == "user":
            out.append(_message("user", _text(message.get("content"))))
        elif role == "assistant":
            out.append(_assistant(message, names))
        elif role == "tool":
            source = names.get(str(message.get("tool_call_id")))
            if source is None:
                source = recipient(str(message.get("name") or "tool"))
            out.append(f"{START}{source} to=assistant{CHANNEL}commentary{MESSAGE}"
                       f"{_text(message.get('content'))}{END}")
    out.append(START + "assistant")
    return "".join(out)


def _message(role: str, content: str) -> str:
    return f"{START}{role}{MESSAGE}{content}{END}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):   # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _system_message(effort: str, has_functions: bool, identity: str, date: str | None) -> str:
    top = [identity, f"Knowledge cutoff: {KNOWLEDGE_CUTOFF}"]
    if date:
        top.append(f"Current date: {date}")
    channels = ("# Valid channels: analysis, commentary, final. "
                "Channel must be included for every message.")
    if has_functions:
        channels += "\nCalls to these tools must go to the commentary channel: 'functions'."
    return _message("system", "\n\n".join(["\n".join(top), f"Reasoning: {effort}", channels]))


def _developer_content(instructions: str, functions: Sequence[Mapping[str, Any]]) -> str:
    sections = []
    if instructions:
        sections += ["# Instructions", instructions]
    if functions:
        sections.append(tools_section(functions))
    return "\n\n".join(sections)


def _assistant(message: Mapping[str, Any], names: dict[str, str]) -> str:
    calls = message.get("tool_calls") or []
    parts = []
    reasoning = message.get("reasoning_content")
    if reasoning and calls:   # analysis stays only where a tool call follows it
        parts.append(f"{START}assistant{CHANNEL}analysis{MESSAGE}{reasoning}{END}")
    content = _text(message.get("content"))
    if content:
        channel = "commentary" if calls or message.get("phase") == "commentary" else "final"
        parts.append(f"{START}assistant{CHANNEL}{channel}{MESSAGE}{content}{END}")
    for call in calls:
        function = call.get("function", {})
        to = recipient(str(function.get("name", "")))
        names[str(call.get("id"))] = to
        arguments = function.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        parts.append(f"{START}assistant{call_header(to)}{MESSAGE}{arguments}{CALL}")
    return "".join(parts)


# ---- tool declarations ----------------------------------------------------------------------

def tools_section(functions: Sequence[Mapping[str, Any]]) -> str:
    """`# Tools` with one TypeScript-like namespace per tool namespace (`functions` for tools
    without one), as openai-harmony's `template_tools_section` writes it; a tool whose
    parameters declare no properties takes none (`() => any`), as in gpt-oss's template."""
    namespaces: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for function in functions:
        namespace, _, name = recipient(str(function.get("name", ""))).rpartition(".")
        namespaces.setdefault(namespace, []).append((name, function))
    sections = ["# Tools"]
    for namespace, members in namespaces.items():
        lines = [f"## {namespace}\n", f"namespace {namespace} {{\n"]
        for name, function in members:
            lines += [f"// {line}" for line in str(function.get("description") or "").splitlines()]
            parameters = function.get("parameters")
            if isinstance(parameters, dict) and parameters.get("properties"):
                lines.append(f"type {name} = (_: {typescript(parameters)}) => any;\n")
            else:
                lines.append(f"type {name} = () => any;\n")
        lines.append(f"}} // namespace {namespace}")
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _default_comment(schema: Mapping[str, Any]) -> str | None:
    if "default" not in schema:
        return None
    default = schema["default"]
    if isinstance(default, str):
        return f'default: "{default}"' if not schema.get("enum") else f"default: {default}"
    return f"default: {_compact(default)}"


def _nullable(schema: Mapping[str, Any], text: str) -> str:
    return f"{text} | null" if schema.get("nullable") is True and "null" not in text else text


def typescript(schema: Any, indent: str = "") -> str:
    """A JSON schema as harmony's TypeScript-like type (openai-harmony's
    `json_schema_to_typescript`, plus `anyOf` as a union, which gpt-oss's template renders)."""
    if not isinstance(schema, dict):
        return "any"
    if isinstance(schema.get("oneOf"), list):
        out = []
        for variant in schema["oneOf"]:
            out.append(f"\n{indent} | " + _nullable(variant, typescript(variant, indent + "   ")))
            comments = [c for c in (variant.get("description") if isinstance(variant, dict)
                                    else None,
                                    _default_comment(variant) if isinstance(variant, dict)
                                    else None) if isinstance(c, str)]
            if comments:
                out.append(" // " + " ".join(comments))
        return "".join(out)
    if isinstance(schema.get("anyOf"), list):
        return " | ".join(_nullable(v, typescript(v, indent)) if isinstance(v, dict) else "any"
                          for v in schema["anyOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        names = ["number" if k == "integer" else str(k) for k in kind if isinstance(k, str)]
        if names:
            return " | ".join(names)
    if kind == "object":
        return _object(schema, indent)
    if kind == "string":
        enum = [f'"{v}"' for v in schema.get("enum") or () if isinstance(v, str)]
        return " | ".join(enum) if enum else "string"
    if kind in ("number", "integer"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "array":
        return f"{typescript(schema['items'], indent)}[]" if "items" in schema else "Array<any>"
    return "any"


def _object(schema: Mapping[str, Any], indent: str) -> str:
    out = []
    if isinstance(schema.get("description"), str):
        out.append(f"{indent}// {schema['description']}\n")
    out.append("{\n")
    properties = schema.get("properties")
    required = set(r for r in schema.get("required") or () if isinstance(r, str))
    for key, value in (properties.items() if isinstance(properties, dict) else ()):
        value = value if isinstance(value, dict) else {}
        optional = "" if key in required else "?"
        if isinstance(value.get("title"), str):
            out.append(f"{indent}// {value['title']}\n{indent}//\n")
        variants = value.get("oneOf")
        if not isinstance(variants, list) and isinstance(value.get("description"), str):
            out.append(f"{indent}// {value['description']}\n")
        examples = value.get("examples")
        if isinstance(examples, list) and examples:
            out.append(f"{indent}// Examples:\n")
            out += [f'{indent}// - "{e}"\n' for e in examples if isinstance(e, str)]
        if isinstance(variants, list):
            out.append(_one_of_property(key, optional, value, variants, indent))
            continue
        out.append(f"{indent}{key}{optional}: "
                   + _nullable(value, typescript(value, indent + "    ")) + ",")
        default = _default_comment(value)
        if default is not None:
            out.append(f" // {default}")
        out.append("\n")
    out.append(f"{indent}}}")
    return "".join(out)


def _one_of_property(key: str, optional: str, value: Mapping[str, Any], variants: list[Any],
                     indent: str) -> str:
    out = []
    description = value.get("description") if isinstance(value.get("description"), str) else None
    first = variants[0] if variants and isinstance(variants[0], dict) else {}
    described_above = description is not None and first.get("description") != description
    if described_above:
        out.append(f"{indent}// {description}\n")
    default = _default_comment(value)
    if default is not None:
        out.append(f"{indent}// {default}\n")
    out.append(f"{indent}{key}{optional}:\n")
    for i, variant in enumerate(variants):
        variant = variant if isinstance(variant, dict) else {}
        out.append(f"{indent} | " + _nullable(variant, typescript(variant, indent + "   ")))
        comments = []
        own = variant.get("description")
        if not (i == 0 and described_above) and isinstance(own, str) and own != description:
            comments.append(own)
        variant_default = _default_comment(variant)
        if variant_default is not None:
            comments.append(variant_default)
        if comments:
            out.append(" // " + " ".join(comments))
        out.append("\n")
    out.append(f"{indent},\n")
    return "".join(out)
