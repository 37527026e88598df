"""Synthetic chat data for the bundled tiny model.

Every example is a conversation (OpenAI chat-message dicts, as `apply_chat_template` takes
them) plus an optional `tools` list. The model only ever learns a handful of task families
(see the model card, src/triode/model/tiny/README.md); what makes it useful as a test fixture
is that copying generalises, so the words it copies are drawn mostly from open-ended random
strings, never only from fixed lists.

Determinism: one `random.Random(seed)` drives everything; no set iteration anywhere.
"""

from __future__ import annotations

import ast
import functools
import json
import random
import re
import string
import sysconfig
from pathlib import Path
from typing import Any

# Words the generator may use. The held-out "unseen words" set (see HELDOUT_WORDS) is checked
# against these at import time, so the two never overlap.
TRAIN_WORDS = (
    "silver lake river stone cloud amber maple cedar birch willow ocean harbor valley canyon "
    "meadow forest desert island summit glacier thunder breeze ember frost coral pearl copper "
    "iron cobalt violet crimson indigo scarlet ivory onyx jade ruby topaz opal garnet quartz "
    "falcon raven otter badger heron panda tiger koala lynx bison moose walrus parrot robin "
    "sparrow dolphin salmon trout lemon mango peach plum cherry melon olive pepper ginger "
    "basil thyme clove honey sugar bread butter cheese pasta rice bean tomato carrot onion "
    "garlic potato radish turnip lantern candle mirror window ladder basket bottle button "
    "pencil paper marble rocket engine wagon bridge tunnel castle tower garden kitchen cellar "
    "attic village market school museum library station airport planet comet orbit galaxy "
    "nebula quasar photon proton atom pixel vector matrix kernel socket packet router server "
    "cipher token signal sensor motor gear spring wheel anchor sail mast deck compass beacon "
    "alpha beta gamma delta omega sigma zeta theta kappa lambda north south east west winter "
    "summer autumn morning evening midnight dawn dusk tuesday friday july october quiet brave "
    "gentle rapid silent bright dark ancient modern hollow solid narrow wide tiny giant"
).split()

TOOL_PARTS = (
    "get set find list create update delete fetch search send read write check lookup "
    "weather time stock price user order file email message event note task item record "
    "account balance temperature forecast route distance translate convert calendar ticket"
).split()

KEY_WORDS = (
    "place name query id count limit date unit text path value amount country zone "
    "from to lang title body tag kind level page size mode code color status"
).split()

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a concise assistant.",
    "Be brief.",
    "Answer exactly as asked.",
    "You are triode, a local model.",
    "Follow the user's instructions.",
)

# Never used by the generator: the "unseen words" evaluation draws from these.
HELDOUT_WORDS = (
    "hello world green fox Paris London Tokyo Berlin apple banana orange purple yellow "
    "house dog cat bird fish table chair music dance happy funny coffee water pizza "
    "Monday Sunday doctor teacher Alice Bob Madrid Rome Seattle laptop phone camera"
).split()
HELDOUT_TOOLS = ("get_weather", "lookup_stock_price", "send_invoice", "book_flight", "add_numbers")
HELDOUT_KEYS = ("age", "ticker", "city", "email", "flight", "x", "y", "currency")

_overlap = sorted(set(HELDOUT_WORDS) & set(TRAIN_WORDS))
assert not _overlap, _overlap

VOWELS = "aeiou"
CONSONANTS = "bcdfghjklmnprstvwz"


class Words:
    """Draws words: some from TRAIN_WORDS, most open-ended."""

    def __init__(self, rng: random.Random, *, unseen: bool = False):
        self.rng = rng
        self.unseen = unseen

    def random_letters(self) -> str:
        n = self.rng.choice((1, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 8, 9, 10, 12))
        return "".join(self.rng.choice(string.ascii_lowercase) for _ in range(n))

    def pseudo_word(self) -> str:
        syllables = self.rng.randint(1, 4)
        out = []
        for _ in range(syllables):
            if self.rng.random() < 0.8:
                out.append(self.rng.choice(CONSONANTS))
            out.append(self.rng.choice(VOWELS))
            if self.rng.random() < 0.4:
                out.append(self.rng.choice(CONSONANTS))
        return "".join(out)

    def number(self) -> str:
        digits = self.rng.choice((1, 1, 2, 2, 3, 3, 4, 5, 6, 8))
        first = self.rng.choice("123456789")
        return first + "".join(self.rng.choice(string.digits) for _ in range(digits - 1))

    def word(self) -> str:
        r = self.rng.random()
        if self.unseen:
            if r < 0.5:
                w = self.rng.choice(HELDOUT_WORDS)
            elif r < 0.75:
                w = self.random_letters()
            else:
                w = self.number()
        else:
            if r < 0.3:
                w = self.rng.choice(TRAIN_WORDS)
            elif r < 0.55:
                w = self.pseudo_word()
            elif r < 0.8:
                w = self.random_letters()
            elif r < 0.92:
                w = self.number()
            else:
                w = self.mixed()
        return self.case(w)

    def mixed(self) -> str:
        n = self.rng.randint(2, 8)
        return "".join(self.rng.choice(string.ascii_letters + string.digits) for _ in range(n))

    def case(self, w: str) -> str:
        r = self.rng.random()
        if r < 0.2:
            return w.capitalize()
        if r < 0.25:
            return w.upper()
        return w

    def phrase(self, lo: int = 1, hi: int = 4) -> str:
        return " ".join(self.word() for _ in range(self.rng.randint(lo, hi)))

    def identifier(self, parts: tuple[str, ...], heldout: tuple[str, ...]) -> str:
        if self.unseen:
            if self.rng.random() < 0.5:
                return self.rng.choice(heldout)
            return "_".join(self.random_letters() for _ in range(self.rng.randint(1, 3)))
        pieces = []
        for _ in range(self.rng.choice((1, 2, 2, 3))):
            r = self.rng.random()
            pieces.append(
                self.rng.choice(parts) if r < 0.5 else
                self.pseudo_word() if r < 0.75 else self.random_letters()
            )
        return "_".join(pieces)

    def tool_name(self) -> str:
        return self.identifier(TOOL_PARTS, HELDOUT_TOOLS)

    def key(self) -> str:
        return self.identifier(KEY_WORDS, HELDOUT_KEYS)

    def value(self) -> str:
        return self.word()


def json_value(v: str) -> Any:
    """A `k=v` value becomes a JSON number when it is a plain integer, else a string."""
    if v.isdigit() and (v == "0" or not v.startswith("0")):
        return int(v)
    return v


def tool_schema(rng: random.Random, name: str, keys: list[str], values: list[str]) -> dict:
    props = {}
    for k, v in zip(keys, values):
        props[k] = {"type": "integer" if isinstance(json_value(v), int) else "string"}
    params = {"type": "object", "properties": props, "required": list(keys)}
    desc = rng.choice(("", "Run the tool.", f"The {name} tool.", "Look something up."))
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


def tool_call(name: str, args: dict) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": args}}


# ---------------------------------------------------------------------------------------------
# Task families. Each returns (user_text, assistant_message, tools, followups) where followups
# are extra (tool-result, assistant) message pairs for the tool-result family.


RECALL_PROMPT = "Repeat your first answer."


class Tasks:
    FAMILIES = ("reply", "tool", "tool_result", "think", "json")
    # Families that only make sense after earlier turns; evaluated on their own.
    HISTORY_FAMILIES = ("recall",)

    def __init__(self, rng: random.Random, words: Words, long_reply_share: float = 0.0):
        self.rng = rng
        self.w = words
        self.long_reply_share = long_reply_share

    def reply(self) -> tuple[list[dict], list[dict]]:
        # No draw when the share is 0, so the base stage's random stream stays as it was.
        long = self.long_reply_share > 0 and self.rng.random() < self.long_reply_share
        p = self.w.phrase(8, 40) if long else self.w.phrase()
        return [
            {"role": "user", "content": f"Reply with: {p}"},
            {"role": "assistant", "content": p},
        ], []

    def think(self) -> tuple[list[dict], list[dict]]:
        p = self.w.phrase()
        return [
            {"role": "user", "content": f"Think, then reply with: {p}"},
            {"role": "assistant", "content": p, "reasoning_content": f"I should reply with {p}."},
        ], []

    def json(self) -> tuple[list[dict], list[dict]]:
        k = self.w.key()
        v = self.w.phrase(1, 3)
        return [
            {"role": "user", "content": f"Answer in JSON with key {k} and value {v}"},
            {"role": "assistant", "content": json.dumps({k: v}, ensure_ascii=False)},
        ], []

    def _call_spec(self) -> tuple[str, list[str], list[str]]:
        name = self.w.tool_name()
        n = self.rng.choice((0, 1, 1, 1, 2, 2, 2, 3))
        keys: list[str] = []
        while len(keys) < n:
            k = self.w.key()
            if k not in keys:
                keys.append(k)
        return name, keys, [self.w.value() for _ in keys]

    @staticmethod
    def _call_text(name: str, keys: list[str], values: list[str]) -> str:
        if not keys:
            return f"{name}"
        pairs = [f"{k}={v}" for k, v in zip(keys, values)]
        if len(pairs) == 1:
            return f"{name} with {pairs[0]}"
        return f"{name} with {', '.join(pairs[:-1])} and {pairs[-1]}"

    def tool(self) -> tuple[list[dict], list[dict]]:
        calls = [self._call_spec()]
        if self.rng.random() < 0.3:
            second = self._call_spec()
            if second[0] != calls[0][0]:
                calls.append(second)
        if len(calls) == 1:
            text = f"Call {self._call_text(*calls[0])}"
        else:
            text = f"Call {self._call_text(*calls[0])}, then call {self._call_text(*calls[1])}"
        tools = [tool_schema(self.rng, *c) for c in calls]
        for _ in range(self.rng.choice((0, 0, 0, 1))):
            extra = self._call_spec()
            if all(extra[0] != t["function"]["name"] for t in tools):
                tools.insert(self.rng.randint(0, len(tools)), tool_schema(self.rng, *extra))
        msgs = [
            {"role": "user", "content": text},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    tool_call(n, {k: json_value(v) for k, v in zip(ks, vs)}) for n, ks, vs in calls
                ],
            },
        ]
        return msgs, tools

    def tool_result(self) -> tuple[list[dict], list[dict]]:
        msgs, tools = self.tool()
        calls = msgs[-1]["tool_calls"]
        values = []
        for _ in calls:
            v = self.w.phrase(1, 3)
            values.append(v)
            if self.rng.random() < 0.3:
                msgs.append({"role": "tool", "content": json.dumps({self.w.key(): v}, ensure_ascii=False)})
            else:
                msgs.append({"role": "tool", "content": v})
        if len(values) == 1:
            answer = f"The result is {values[0]}."
        else:
            answer = f"The results are {values[0]} and {values[1]}."
        msgs.append({"role": "assistant", "content": answer})
        return msgs, tools

    def make(self, family: str) -> tuple[list[dict], list[dict]]:
        return getattr(self, family)()


def recall_conversation(rng: random.Random, *, unseen: bool = False, prior_turns: int = 2) -> dict:
    """Earlier text-answer turns, then `Repeat your first answer.` → the first answer."""
    words = Words(rng, unseen=unseen)
    tasks = Tasks(rng, words)
    messages: list[dict] = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    for _ in range(prior_turns):
        m, _ = tasks.make(rng.choice(("reply", "reply", "json", "think")))
        messages += m
    first = next(m for m in messages if m["role"] == "assistant")
    messages += [{"role": "user", "content": RECALL_PROMPT},
                 {"role": "assistant", "content": first["content"]}]
    return {"messages": messages, "tools": [], "family": "recall", "turns": prior_turns + 1}


def conversation(rng: random.Random, *, unseen: bool = False, family: str | None = None,
                 prior_turns: int | None = None, long_reply_share: float = 0.0) -> dict:
    """One training/eval example: {"messages", "tools", "family", "turns"}."""
    words = Words(rng, unseen=unseen)
    tasks = Tasks(rng, words, long_reply_share)
    if prior_turns is None:
        prior_turns = rng.choice((0, 0, 0, 0, 1, 2))
    family = family or rng.choice(Tasks.FAMILIES)
    messages: list[dict] = []
    tools: list[dict] = []
    r = rng.random()
    if r < 0.35:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    elif r < 0.45:
        messages.append({"role": "developer", "content": rng.choice(SYSTEM_PROMPTS)})
    for _ in range(prior_turns):
        m, t = tasks.make(rng.choice(Tasks.FAMILIES))
        messages += m
        tools += [x for x in t if x["function"]["name"] not in {y["function"]["name"] for y in tools}]
    m, t = tasks.make(family)
    messages += m
    tools += [x for x in t if x["function"]["name"] not in {y["function"]["name"] for y in tools}]
    return {"messages": messages, "tools": tools, "family": family, "turns": prior_turns + 1}


def expected_completion(example: dict) -> dict:
    """The final assistant message: what the model must produce at temperature 0."""
    return example["messages"][-1]


def prompt_messages(example: dict) -> list[dict]:
    return example["messages"][:-1]


# The second (fine-tuning) stage: everything of the first, plus long copies and recall.
FINETUNE_LONG_REPLY_SHARE = 0.15
FINETUNE_RECALL_SHARE = 0.15


def finetune_example(rng: random.Random) -> dict:
    if rng.random() < FINETUNE_RECALL_SHARE:
        return recall_conversation(rng, prior_turns=rng.choice((1, 2, 2, 3)))
    return conversation(rng, long_reply_share=FINETUNE_LONG_REPLY_SHARE)


# The third (tools) stage: tool calls with open-ended names and keys dominate, the rest of
# the second stage's mix keeps the other families from being forgotten.
TOOLS_STAGE_SHARE = 0.6


def tools_example(rng: random.Random) -> dict:
    if rng.random() < TOOLS_STAGE_SHARE:
        return conversation(rng, family=rng.choice(("tool", "tool", "tool_result")))
    return finetune_example(rng)


# ---------------------------------------------------------------------------------------------
# The fourth (agent) stage: prompts shaped like the ones coding agents send (Codex CLI, the
# Agents SDK): long instructions, many tools with long descriptions, context messages between
# the turns, and tool output wrapped in headers. The model attends to a sliding window (see
# src/triode/model/tiny/sliding_qwen3.py), so what it must learn is to answer the last request
# whatever text fills the window before it. The filler is real English: paragraphs of the
# Python standard library's docstrings (read with `ast`, files sorted: deterministic for a
# given Python version), arranged as the blocks such prompts are made of.


@functools.lru_cache(maxsize=1)
def docstring_paragraphs() -> tuple[str, ...]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests"}
    out = []
    for path in sorted(lib.rglob("*.py")):
        if skip & set(path.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef,
                                     ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            for p in re.split(r"\n\s*\n", doc or ""):
                p = " ".join(p.split())
                if p.isascii() and 12 <= len(p.split()) <= 120 and not p.startswith(">>>"):
                    out.append(p)
    return tuple(out)


TAGS = ("environment_context", "permissions", "instructions", "user_instructions", "context",
        "skills", "notes", "cwd", "shell", "sandbox", "approval_policy", "project_doc")


class Filler:
    """Blocks of instruction-like text: prose, markdown sections and lists, tagged blocks,
    `key: value` lines, code fences."""

    def __init__(self, rng: random.Random, words: Words):
        self.rng = rng
        self.w = words
        self.paragraphs = docstring_paragraphs()

    def paragraph(self) -> str:
        return self.rng.choice(self.paragraphs)

    def sentences(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            s = re.split(r"(?<=[.!?]) ", self.paragraph())
            out.append(self.rng.choice(s))
        return out

    def block(self) -> str:
        kind = self.rng.choice(("prose", "prose", "section", "list", "tagged", "fields", "code"))
        if kind == "prose":
            return "\n\n".join(self.paragraph() for _ in range(self.rng.randint(1, 3)))
        if kind == "section":
            title = " ".join(self.paragraph().split()[:self.rng.randint(1, 4)]).rstrip(".,:;")
            return f"{'#' * self.rng.randint(1, 3)} {title}\n\n{self.paragraph()}"
        if kind == "list":
            bullet = self.rng.choice(("- ", "* ", "1. "))
            return "\n".join(bullet + s for s in self.sentences(self.rng.randint(2, 8)))
        if kind == "tagged":
            tag = self.rng.choice(TAGS)
            inner = self.block() if self.rng.random() < 0.5 else self.fields()
            return f"<{tag}>\n{inner}\n</{tag}>"
        if kind == "fields":
            return self.fields()
        code = self.paragraph().split()
        body = "\n".join(" ".join(code[i:i + 6]) for i in range(0, len(code), 6))
        return f"```\n{body}\n```"

    def fields(self) -> str:
        lines = []
        for _ in range(self.rng.randint(1, 6)):
            k = self.w.key()
            v = self.rng.choice((self.w.phrase(1, 3), f"/{self.w.random_letters()}/"
                                 f"{self.w.random_letters()}", self.w.number()))
            lines.append(self.rng.choice((f"{k}: {v}", f"<{k}>{v}</{k}>")))
        return "\n".join(lines)

    def text(self, words: int) -> str:
        parts: list[str] = []
        n = 0
        while n < words:
            b = self.block()
            parts.append(b)
            n += len(b.split())
        return "\n\n".join(parts)

    def tool(self, name: str | None = None, keys: dict[str, dict] | None = None) -> dict:
        """A tool with a long description and optional parameters the call leaves out."""
        props = dict(keys or {})
        for _ in range(self.rng.choice((0, 1, 2, 3))):
            k = self.w.key()
            if k not in props:
                props[k] = {"type": self.rng.choice(("string", "integer", "boolean")),
                            "description": " ".join(self.sentences(1))}
        for spec in props.values():
            if "description" not in spec and self.rng.random() < 0.5:
                spec["description"] = " ".join(self.sentences(1))
        params = {"type": "object", "properties": props, "required": list(keys or {}),
                  "additionalProperties": False}
        return {"type": "function", "function": {
            "name": name or self.w.tool_name(),
            "description": " ".join(self.sentences(self.rng.randint(1, 3))),
            "parameters": params}}


# Headers tools put before a command's output (Codex's exec_command is one of these shapes).
OUTPUT_HEADERS = (
    lambda r: f"Chunk ID: {r.getrandbits(24):06x}",
    lambda r: f"Wall time: {r.random():.4f} seconds",
    lambda r: f"Process exited with code {r.choice((0, 0, 0, 1, 2))}",
    lambda r: f"Original token count: {r.randint(1, 400)}",
    lambda r: f"Exit code: {r.choice((0, 0, 1))}",
    lambda r: f"Duration: {r.random() * 3:.1f}s",
    lambda r: f"Status: {r.choice(('ok', 'success', 'completed'))}",
    lambda r: f"Session ID: {r.randint(1000, 99999)}",
)


def wrapped_output(rng: random.Random, value: str) -> str:
    """A tool's output as agent harnesses return it: headers, then the output itself."""
    r = rng.random()
    if r < 0.2:
        meta = {"exit_code": rng.choice((0, 0, 1)), "duration_seconds": round(rng.random(), 1)}
        return json.dumps({"output": value + rng.choice(("", "\n")), "metadata": meta})
    if r < 0.5:   # all of one harness's lines, in its order
        headers = [h(rng) for h in OUTPUT_HEADERS[:4]]
    else:
        headers = [h(rng) for h in rng.sample(OUTPUT_HEADERS, rng.randint(1, 4))]
    return "\n".join(headers) + "\nOutput:\n" + value + rng.choice(("", "\n"))


def output_value(words: Words) -> str:
    """What a command prints: words, hyphenated or dotted names, paths."""
    rng = words.rng
    r = rng.random()
    if r < 0.35:
        return words.phrase(1, 3)
    if r < 0.65:
        return rng.choice("-_.").join(words.word().lower() for _ in range(rng.randint(2, 3)))
    if r < 0.8:
        return "/".join(words.word().lower() for _ in range(rng.randint(2, 4))) + \
            rng.choice(("", ".txt", ".py", ".md"))
    return f"{words.word()} {rng.choice('-:=')} {words.word()}"


AGENT_FAMILIES = ("reply", "reply", "tool", "tool", "tool_result", "tool_result", "think",
                  "json", "recall")


def agent_example(rng: random.Random, *, unseen: bool = False, family: str | None = None,
                  filler_words: tuple[int, int] = (20, 300)) -> dict:
    """Instructions, tools and context messages of random length, then a task."""
    words = Words(rng, unseen=unseen)
    tasks = Tasks(rng, words, long_reply_share=0.1)
    filler = Filler(rng, Words(rng))
    family = family or rng.choice(AGENT_FAMILIES)
    budget = rng.randint(*filler_words)
    messages: list[dict] = []
    share = rng.random()
    if rng.random() < 0.9:
        messages.append({"role": rng.choice(("system", "developer")),
                         "content": filler.text(int(budget * share))})
    tools = [filler.tool() for _ in range(rng.choice((0, 1, 1, 2, 3)))]

    def context() -> None:
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            messages.append({"role": rng.choice(("developer", "user")),
                             "content": filler.text(int(budget * (1 - share) / 2) + 1)})

    context()
    turns = rng.choice((0, 0, 1, 2)) if family != "recall" else rng.choice((1, 2, 2))
    for _ in range(turns):
        m, t = tasks.make(rng.choice(("reply", "json", "think", "tool_result")))
        messages += m
        tools += [filler.tool(x["function"]["name"], x["function"]["parameters"]["properties"])
                  for x in t]
        if rng.random() < 0.3:
            context()
    if family == "recall":
        first = next(m for m in messages if m["role"] == "assistant")
        messages += [{"role": "user", "content": RECALL_PROMPT},
                     {"role": "assistant", "content": first["content"]}]
    else:
        context()
        m, t = tasks.make("tool" if family == "tool_result" else family)
        if family == "tool_result":
            values = []
            for _ in m[-1]["tool_calls"]:
                v = output_value(words)
                values.append(v)
                m.append({"role": "tool", "content": wrapped_output(rng, v)
                          if rng.random() < 0.7 else v})
            m.append({"role": "assistant", "content": f"The result is {values[0]}." if
                      len(values) == 1 else f"The results are {values[0]} and {values[1]}."})
        messages += m
        for x in t:
            tools.insert(rng.randint(0, len(tools)), filler.tool(
                x["function"]["name"], x["function"]["parameters"]["properties"]))
    seen: set[str] = set()
    unique = []
    for x in tools:
        if x["function"]["name"] not in seen:
            seen.add(x["function"]["name"])
            unique.append(x)
    return {"messages": messages, "tools": unique, "family": family, "turns": turns + 1}


AGENT_STAGE_SHARE = 0.6


def agent_stage_example(rng: random.Random, share: float | None = None) -> dict:
    """An agent example with probability `share` (default AGENT_STAGE_SHARE), else a tools
    stage example."""
    if rng.random() < (AGENT_STAGE_SHARE if share is None else share):
        return agent_example(rng)
    return tools_example(rng)
