"""JSON Schema from Python types, for the OpenAPI document (openapi.py).

Two kinds of type are walked, each into a named schema under `components/schemas`:

- request bodies: the attrs wire types (`responses/wire.py`, `responses/conversations.py`),
  read as the one cattrs converter (`responses/convert.py`) structures them. A field without
  a default is required; unknown fields are refused (`additionalProperties: false`); `int`
  takes no boolean and `float` takes integers; `list[X]` takes only an array; the unions in
  `convert.TAGGED_UNIONS` are told apart by `type` (`oneOf`), which every member must state
  except the input items `convert.IMPLICIT_ITEM_TYPES` lets leave it out; every other union
  is an `anyOf` (the converter's string-or-list and string-or-object hooks accept exactly
  that).
- answers: the attrs answer types of `responses/objects.py` (every field required but the
  ones left out while None) and TypedDicts (the canonical input items, the routes' own),
  every key required but the `NotRequired` ones; other keys allowed (a client must not
  break on a new field).

`Refinements` add what a type cannot say but the request's validation enforces (bounds,
enums of accepted strings, list lengths); they are keyed by class and field and built from
the validating modules' own constants (openapi.py).
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any, Literal, NotRequired, Union

import attrs

from ..responses.convert import IMPLICIT_ITEM_TYPES, TAGGED_UNIONS
from ..responses.wire import json_name

JSON = dict[str, Any]
Refinements = dict[tuple[type, str], JSON]

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                            type(None): "null"}


class Schemas:
    """Walks types into JSON Schema; `components` collects every named one by its name."""

    def __init__(self, refinements: Refinements | None = None):
        self.components: dict[str, JSON] = {}
        self._named: dict[str, Any] = {}     # component name → the type it was made from
        self._refinements = refinements or {}
        implicit = {tag for _, tag in IMPLICIT_ITEM_TYPES}
        # Classes that must state their `type` (members of a tagged union, but the implicit).
        self._tagged = {cls for table in TAGGED_UNIONS.values()
                        for tag, cls in table.items() if tag not in implicit}
        self._tagged_unions = {_union_key(u): u for u in TAGGED_UNIONS}

    def ref(self, name: str) -> JSON:
        return {"$ref": f"#/components/schemas/{name}"}

    def of(self, tp: Any, *, defaulted: tuple[str, ...] = ()) -> JSON:
        """The schema of `tp` (a `$ref` for a class or TypedDict). `defaulted`: required
        fields of the class `tp` that may be left out (a variant named after them)."""
        if defaulted:
            return self._defaulted(tp, defaulted)
        if tp is Any:
            return {}
        if tp in _SCALARS:
            return {"type": _SCALARS[tp]}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return _enum([member.value for member in tp])
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Literal:
            return _enum(list(args))
        if origin is list:
            return {"type": "array", "items": self.of(args[0])}
        if origin is dict:
            values = self.of(args[1])
            return {"type": "object", **({"additionalProperties": values} if values else {})}
        if origin in (Union, types.UnionType):
            return self._union(tp, args)
        if attrs.has(tp) and getattr(tp, "__triode_answer__", False):
            return self._named_schema(tp, self._answer_schema)
        if attrs.has(tp):
            return self._named_schema(tp, self._attrs_schema)
        if typing.is_typeddict(tp):
            return self._named_schema(tp, self._typeddict_schema)
        raise TypeError(f"no JSON Schema for {tp!r}")

    def _defaulted(self, cls: type, fields: tuple[str, ...]) -> JSON:
        self.of(cls)
        name = f"{cls.__name__}With{''.join(f.title() for f in fields)}Defaulted"
        base = self.components[cls.__name__]
        required = [f for f in base.get("required", []) if f not in fields]
        self.components[name] = {**{k: v for k, v in base.items() if k != "required"},
                                 **({"required": required} if required else {})}
        return self.ref(name)

    def _union(self, tp: Any, args: tuple[Any, ...]) -> JSON:
        if _union_key(tp) in self._tagged_unions:
            return {"oneOf": [self.of(member) for member in args]}
        members = [self.of(member) for member in args]
        if all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
            return {"type": [m["type"] for m in members]}   # scalars (and null): one list
        return {"anyOf": members}

    def _named_schema(self, tp: type, build: typing.Callable[[Any], JSON]) -> JSON:
        name = getattr(tp, "__schema_name__", tp.__name__)
        if self._named.setdefault(name, tp) is not tp:
            raise TypeError(f"two types are named {name}: {self._named[name]!r} and {tp!r}")
        if name not in self.components:
            self.components[name] = {}        # a placeholder: recursive types end here
            self.components[name] = build(tp)
        return self.ref(name)

    def _attrs_schema(self, cls: type) -> JSON:
        hints = typing.get_type_hints(cls)
        properties: JSON = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            prop = {**self.of(hints[field.name]), **self._refinements.get((cls, field.name), {})}
            if field.default is attrs.NOTHING or (field.name == "type" and cls in self._tagged):
                required.append(json_name(field))
            else:
                prop["default"] = _default(field.default)
            properties[json_name(field)] = prop
        out: JSON = {"type": "object", "properties": properties}
        if required:
            out["required"] = required
        out["additionalProperties"] = False      # the converter forbids unknown fields
        if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):
            out["description"] = " ".join(cls.__doc__.split())
        return out

    def _answer_schema(self, cls: type) -> JSON:
        """An answer type (responses/objects.py): every field is present but the ones left
        out while None; other keys allowed (a client must not break on a new field)."""
        hints = typing.get_type_hints(cls)
        properties: JSON = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            properties[field.name] = {**self.of(hints[field.name]),
                                      **self._refinements.get((cls, field.name), {})}
            if field.metadata.get("omitted"):
                # Left out while None: present, it has a value.
                properties[field.name] = self.of(_without_none(hints[field.name]))
            else:
                required.append(field.name)
        out: JSON = {"type": "object", "properties": properties, "required": required}
        if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):
            out["description"] = " ".join(cls.__doc__.split())
        return out

    def _typeddict_schema(self, td: type) -> JSON:
        hints = typing.get_type_hints(td, include_extras=True)
        properties: JSON = {}
        required: list[str] = []
        for key, hint in hints.items():
            if typing.get_origin(hint) is NotRequired:
                hint = typing.get_args(hint)[0]
            else:
                # `__required_keys__` cannot be trusted: under `from __future__ import
                # annotations` Python 3.11 does not see NotRequired there.
                required.append(key)
            properties[key] = {**self.of(hint), **self._refinements.get((td, key), {})}
        out: JSON = {"type": "object", "properties": properties, "required": required}
        if td.__doc__:
            out["description"] = " ".join(td.__doc__.split())
        return out


def _without_none(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return Union[tuple(args)] if len(args) > 1 else args[0]


def _union_key(tp: Any) -> frozenset[Any]:
    return frozenset(typing.get_args(tp))


def _enum(values: list[Any]) -> JSON:
    kinds = {_SCALARS[type(v)] for v in values}
    kind: Any = kinds.pop() if len(kinds) == 1 else sorted(kinds)
    if len(values) == 1:
        return {"type": kind, "const": values[0]}
    return {"type": kind, "enum": values}


def _default(default: Any) -> Any:
    if isinstance(default, attrs.Factory):      # type: ignore[arg-type]
        return default.factory()
    return default
