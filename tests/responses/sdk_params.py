"""The request fields the installed `openai` SDK defines, walked out of its parameter
TypedDicts (`tests/responses/test_sdk_fields.py` and docs/compatibility.md use them).

Every field has a key:

- `<endpoint>.<field>[.<field>...]`: a field of one endpoint's parameters and the shapes
  nested under it (`create.prompt_cache_options.ttl`);
- `item.<type>.<field>...`, `part.<type>.<field>...`, `tool.<type>.<field>...`: a field of an
  input item, a content part or a tool, shared by every endpoint that takes them
  (`item.message.phase`, `part.input_text.prompt_cache_breakpoint.mode`);
- `item.<type>` / `part.<type>` / `tool.<type>` alone: a whole item, part or tool type
  triode does not take apart (a hosted tool it drops, an item type it refuses), whose
  fields are then not listed one by one.

The members of any other union are merged into one shape (`create.tool_choice.name`).
"""

from __future__ import annotations

import types
import typing
from typing import Any, Iterator, Literal, Union

import attrs
import typing_extensions

from openai.types.conversations import (conversation_create_params, conversation_update_params,
                                        item_create_params, item_list_params,
                                        item_retrieve_params)
from openai.types.responses import (input_item_list_params, input_token_count_params,
                                    response_compact_params, response_create_params,
                                    response_retrieve_params)

# endpoint → its parameters (a body, or, where marked, a query string).
ENDPOINTS: dict[str, tuple[type, ...]] = {
    "create": (response_create_params.ResponseCreateParamsStreaming,
               response_create_params.ResponseCreateParamsNonStreaming),
    "compact": (response_compact_params.ResponseCompactParams,),
    "input_tokens": (input_token_count_params.InputTokenCountParams,),
    "retrieve": (response_retrieve_params.ResponseRetrieveParamsStreaming,
                 response_retrieve_params.ResponseRetrieveParamsNonStreaming),
    "input_items.list": (input_item_list_params.InputItemListParams,),
    "conversations.create": (conversation_create_params.ConversationCreateParams,),
    "conversations.update": (conversation_update_params.ConversationUpdateParams,),
    "conversations.items.create": (item_create_params.ItemCreateParams,),
    "conversations.items.list": (item_list_params.ItemListParams,),
    "conversations.items.retrieve": (item_retrieve_params.ItemRetrieveParams,),
}
# Parameters that travel in the query string (or the path), not the JSON body.
QUERY = {"retrieve": None, "input_items.list": None, "conversations.items.list": None,
         "conversations.items.retrieve": None,
         "conversations.items.create": ("include",)}   # None: all of them

# The fields whose union members are items, content parts or tools (named by their `type`).
ROOT_FIELDS = {"input": "item", "items": "item", "content": "part", "output": "part",
               "variables": "part", "tools": "tool"}


@attrs.frozen
class Shape:
    """One key's type: the TypedDicts merged into it (empty for a scalar field), the
    field's own type hint, and the key of the shape it is a field of."""

    key: str
    hints: tuple[Any, ...]
    classes: tuple[type, ...] = ()


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) in (typing.Required, typing.NotRequired,
                                    typing_extensions.Required, typing_extensions.NotRequired,
                                    typing.Annotated):
        tp = typing.get_args(tp)[0]
    return tp


def typeddicts(tp: Any) -> Iterator[type]:
    """The TypedDicts a type hint can hold (through unions, lists, iterables, dicts)."""
    tp = _unwrap(tp)
    if typing_extensions.is_typeddict(tp):
        yield tp
        return
    origin = typing.get_origin(tp)
    if origin is Literal or origin is None:
        return
    args = typing.get_args(tp)
    if origin is dict or origin is typing.Dict:
        args = args[1:]
    for arg in args:
        yield from typeddicts(arg)


def hints(td: type) -> dict[str, Any]:
    return typing.get_type_hints(td)


_REQUIRED = (typing.Required, typing_extensions.Required)
_NOT_REQUIRED = (typing.NotRequired, typing_extensions.NotRequired)


def required(td: type) -> list[str]:
    """A TypedDict's required keys. The SDK's modules postpone their annotations, so
    `__required_keys__` misses `Required[...]` (it still knows each class's totality)."""
    out = []
    for name, hint in typing.get_type_hints(td, include_extras=True).items():
        origin = typing.get_origin(hint)
        if origin in _REQUIRED or (name in td.__required_keys__
                                   and origin not in _NOT_REQUIRED):
            out.append(name)
    return out


def tag(td: type) -> str | None:
    """A TypedDict's `type` (its first literal value), if it states one."""
    tp = _unwrap(hints(td).get("type", None))
    if tp is None:
        return None
    if typing.get_origin(tp) in (Union, types.UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    return str(typing.get_args(tp)[0]) if typing.get_origin(tp) is Literal else None


def _tagged(td: type, root: str) -> str | None:
    """A union member's type as an item, part or tool: its `type`; an item reference may
    leave its `type` out (null)."""
    if root == "item" and set(hints(td)) == {"id", "type"} and tag(td) is None:
        return "item_reference"
    return tag(td)


@attrs.define
class Walk:
    """Every key of the SDK's request parameters. `taken[kind]` are the item, part and
    tool types triode takes apart (their fields are listed); any other is one key."""

    taken: dict[str, frozenset[str]]
    shapes: dict[str, Shape] = attrs.Factory(dict)

    def run(self) -> dict[str, Shape]:
        for endpoint, classes in ENDPOINTS.items():
            self._shape(endpoint, classes)
        return self.shapes

    def _add(self, key: str, hint: Any, classes: tuple[type, ...] = ()) -> bool:
        old = self.shapes.get(key)
        if old is None:
            self.shapes[key] = Shape(key, (hint,), classes)
            return True
        new = tuple(c for c in classes if c not in old.classes)
        self.shapes[key] = Shape(key, (*old.hints, hint), (*old.classes, *new))
        return bool(new)

    def _shape(self, key: str, classes: tuple[type, ...]) -> None:
        """The fields of the TypedDicts `classes`, merged, under `key`."""
        fields: dict[str, list[Any]] = {}
        for td in classes:
            for name, hint in hints(td).items():
                fields.setdefault(name, []).append(hint)
        for name, found in fields.items():
            for hint in found:
                self._field(f"{key}.{name}", name, hint)

    def _field(self, key: str, name: str, hint: Any) -> None:
        members = list(typeddicts(hint))
        root = ROOT_FIELDS.get(name)
        if root is not None and members and all(_tagged(m, root) for m in members):
            self._add(key, hint)
            for member in members:
                kind_tag = _tagged(member, root)
                sub = f"{root}.{kind_tag}"
                assert kind_tag is not None
                if kind_tag not in self.taken[root]:
                    self._add(sub, member, (member,))
                elif self._add(sub, member, (member,)):
                    self._shape(sub, (member,))
            return
        if self._add(key, hint, tuple(members)) and members:
            self._shape(key, tuple(members))


def keys(taken: dict[str, frozenset[str]]) -> dict[str, Shape]:
    return Walk(taken).run()


def field_hint(shape: Shape) -> Any:
    """The first hint of a scalar key (a field's own type)."""
    return shape.hints[0]
