"""Synthetic chat data for the bundled tiny model.

Every example is a conversation (OpenAI chat-message dicts, as `apply_chat_template` takes
them) plus an optional `tools` list. The model only ever learns a handful of task families
(see the model card, src/triode/model/tiny/README.md); what makes it useful as a test fixture
is that copying generalises, so the words it copies are drawn mostly from open-ended random
strings, never only from fixed lists.

Determinism: one `random.Random(seed)` drives everything; no set iteration anywhere.
"""

from __future__ import annotations

import json
import random
import string
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
