"""The one cattrs Converter: JSON → wire types, strictly.

Wrong types are errors (no "5" → 5, no true → 1, no 1.5 → 1; 2.0 is the integer 2, as in JSON
Schema), unknown fields are errors, and every error becomes an `InvalidRequest` whose `param`
is the JSON path of the offending field (`input[2].content`), as OpenAI reports it.
"""

from __future__ import annotations

import typing
from typing import Any, Callable, Union

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError
from cattrs.gen import make_dict_structure_fn, override

from ..errors import InvalidRequest
from . import wire

converter = cattrs.Converter(forbid_extra_keys=True)


Hook = Callable[[Any, Any], Any]


def _strict(kind: type, name: str, accept: tuple[type, ...], reject: tuple[type, ...] = ()
            ) -> Hook:
    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, reject) or not isinstance(value, accept):
            raise TypeError(f"expected {name}, got {_json_type(value)}")
        return kind(value)

    return hook


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _integer(value: Any, _: Any) -> int:
    """An integer, also written as a number without a fraction (`2.0`, `1e3`): JSON and
    JSON Schema do not tell those apart, and a client's serializer may write either."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {_json_type(value)}")
    return value


converter.register_structure_hook(str, _strict(str, "a string", (str,)))
converter.register_structure_hook(int, _integer)
converter.register_structure_hook(float, _strict(float, "a number", (int, float), (bool,)))
converter.register_structure_hook(bool, _strict(bool, "a boolean", (bool,)))


def _is_list(tp: Any) -> bool:
    return typing.get_origin(tp) is list


def _array(tp: Any) -> Hook:
    """`list[X]` takes a JSON array only: cattrs' own hook iterates anything, so a string
    would become its characters and an object its keys."""
    items = list_structure_factory(tp, converter)

    def hook(value: Any, t: Any) -> Any:
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {_json_type(value)}")
        return items(value, t)

    return hook


def _object(cls: type) -> Hook:
    """An attrs class takes a JSON object only, and says so (cattrs' own error would be
    "'str' object has no attribute 'keys'"). A field with a JSON name of its own
    (`wire.renamed`) is read under that name."""
    renames: dict[str, Any] = {f.name: override(rename=wire.json_name(f))
                               for f in attrs.fields(cls) if wire.json_name(f) != f.name}
    fields: Hook = make_dict_structure_fn(cls, converter, **renames)

    def hook(value: Any, t: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {_json_type(value)}")
        return fields(value, t)

    return hook


def _is_str_dict(tp: Any) -> bool:
    return typing.get_origin(tp) is dict and typing.get_args(tp)[:1] == (str,) \
        and tp not in (dict[str, Any], dict[str, str])


class _KeyNote(str):
    """Names a mapping's key in an error's path (read as an attrs field's note is)."""

    @property
    def name(self) -> str:
        return str(self)


_FAILURES = (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError,
             TypeError, ValueError, KeyError)


def _mapping(tp: Any) -> Hook:
    """`dict[str, X]` takes a JSON object only, each value an X."""
    value_type = typing.get_args(tp)[1]

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {_json_type(value)}")
        out, errors = {}, []
        for key, item in value.items():
            try:
                out[key] = converter.structure(item, value_type)
            except _FAILURES as exc:
                exc.add_note(_KeyNote(key))
                errors.append(exc)
        if errors:
            raise ClassValidationError("invalid values", errors, dict)
        return out

    return hook


converter.register_structure_hook_factory(_is_list, _array)
converter.register_structure_hook_factory(_is_str_dict, _mapping)
converter.register_structure_hook_factory(attrs.has, _object)


def _register(tp: Any, hook: Any) -> None:
    """Registers a hook for exactly `tp` (works for generic aliases and unions too)."""
    converter.register_structure_hook_func(lambda t: t == tp, hook)


_register(dict[str, Any], _strict(dict, "an object", (dict,)))


def _metadata(value: Any, _: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {_json_type(value)}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise TypeError(f"metadata values must be strings; {k!r} is {_json_type(v)}")
    return dict(value)


_register(dict[str, str], _metadata)

CONTENT_PARTS = {
    "input_text": wire.InputText, "output_text": wire.OutputText, "refusal": wire.Refusal,
    "input_image": wire.InputImage, "input_file": wire.InputFile,
}


def _tagged(value: Any, table: dict[str, type], what: str, default: str | None = None) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {_json_type(value)}")
    tag = value.get("type", default)
    cls = table.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise ValueError(f"unknown {what} type {tag!r}; expected one of {', '.join(table)}")
    return converter.structure(value, cls)


def _content_part(value: Any, _: Any) -> wire.ContentPart:
    part: wire.ContentPart = _tagged(value, CONTENT_PARTS, "content part")
    return part


# Input items that may leave out `type`, as OpenAI's schema lets them: the type an item
# without one gets, by the first of these fields it has.
IMPLICIT_ITEM_TYPES = (("role", "message"), ("id", "item_reference"))


def _item(value: Any, _: Any) -> wire.InputItem:
    default = None
    if isinstance(value, dict):
        default = next((tag for field, tag in IMPLICIT_ITEM_TYPES if field in value), None)
        if "type" in value and value["type"] is None and default == "item_reference":
            value = {k: v for k, v in value.items() if k != "type"}   # OpenAI's null type
    item: wire.InputItem = _tagged(value, wire.ITEM_TYPES, "input item", default)
    return item


PROMPT_VARIABLE_PARTS = {"input_text": wire.InputText, "input_image": wire.InputImage,
                         "input_file": wire.InputFile}


def _prompt_variable(value: Any, _: Any) -> wire.PromptVariable:
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"expected a string or an object, got {_json_type(value)}")
    part: wire.PromptVariable = _tagged(value, PROMPT_VARIABLE_PARTS, "prompt variable")
    return part


def _str_or_list(item_type: Any) -> Hook:
    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return converter.structure(value, list[item_type])
        raise TypeError(f"expected a string or an array, got {_json_type(value)}")

    return hook


def _str_or_object(value: Any, _: Any) -> Any:
    if value is None or isinstance(value, (str, dict)):
        return value
    raise TypeError(f"expected a string or an object, got {_json_type(value)}")


# The unions told apart by their members' `type` (every member's own Literal): the JSON
# Schema of the API (http/schema.py) is generated from these same tables.
TAGGED_UNIONS: dict[Any, dict[str, type]] = {wire.ContentPart: CONTENT_PARTS,
                                             wire.InputItem: wire.ITEM_TYPES}
_register(wire.ContentPart, _content_part)
_register(wire.InputItem, _item)
_register(wire.PromptVariable, _prompt_variable)
_register(Union[str, list[wire.ContentPart]], _str_or_list(wire.ContentPart))
_register(Union[str, list[wire.InputItem]], _str_or_list(wire.InputItem))
_register(Union[str, dict[str, Any], None], _str_or_object)
_register(Union[str, list[str], None], lambda v, _: v if v is None or isinstance(v, str)
          else converter.structure(v, list[str]))


def _str_or_number(value: Any, _: Any) -> Any:
    if value is None or isinstance(value, str) or (isinstance(value, (int, float))
                                                   and not isinstance(value, bool)):
        return value
    raise TypeError(f"expected a string or a number, got {_json_type(value)}")


_register(Union[str, float, None], _str_or_number)   # keep_alive: 300, "5m"


def structure(data: Any, cls: type) -> Any:
    """Structures `data`; any failure is a 400 naming the first offending field."""
    if not isinstance(data, dict):
        raise InvalidRequest(f"the request body must be a JSON object, not {_json_type(data)}")
    try:
        return converter.structure(data, cls)
    except (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError,
            TypeError, ValueError) as exc:
        path, message = _first_error(exc)
        raise InvalidRequest(message, param=path or None) from None


def _first_error(exc: BaseException, path: str = "") -> tuple[str, str]:
    """Walks cattrs' exception groups (and their notes) down to the first leaf error."""
    if isinstance(exc, ForbiddenExtraKeysError):
        path = _join(path, sorted(exc.extra_fields)[0])
        return path, f"Unknown parameter: '{path}'."
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        sub = exc.exceptions[0]
        note = next((n for n in getattr(sub, "__notes__", []) if hasattr(n, "name")
                     or hasattr(n, "index")), None)
        if note is not None and hasattr(note, "name"):
            path = _join(path, note.name)
        elif note is not None:
            path = f"{path}[{note.index}]"
        return _first_error(sub, path)
    if isinstance(exc, KeyError):
        return path, f"Missing required parameter: '{path}'."
    return path, f"Invalid value for '{path}': {exc}" if path else str(exc)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
