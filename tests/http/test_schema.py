"""JSON Schema walked from Python types (for the OpenAPI document), on small types of the
test's own: request bodies strict, answers lenient, named schemas referenced once."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

import attrs
import pytest

from triode.http.schema import Schemas


@attrs.frozen(kw_only=True)
class Body:
    """A request body."""

    name: str
    count: int = 3
    tags: list[str] = attrs.Factory(list)
    mode: Literal["fast", "slow"] = "fast"
    limit: int | None = None


@attrs.frozen
class Node:
    value: int
    children: list[Node] = attrs.Factory(list)


class Answer(TypedDict):
    """An answer."""

    id: str
    note: NotRequired[str]


def test_a_body_requires_its_fields_without_defaults_and_refuses_unknown_ones():
    """Required: the fields without a default; every default is stated; no other key."""
    schemas = Schemas()
    assert schemas.of(Body) == {"$ref": "#/components/schemas/Body"}
    body = schemas.components["Body"]
    assert body["required"] == ["name"]
    assert body["additionalProperties"] is False
    assert body["description"] == "A request body."
    props = body["properties"]
    assert props["count"] == {"type": "integer", "default": 3}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "default": []}
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"], "default": "fast"}
    assert props["limit"] == {"type": ["integer", "null"], "default": None}


def test_an_answer_allows_new_keys_and_requires_all_but_the_not_required():
    """A TypedDict answer: every key required but the NotRequired ones; other keys allowed
    (a client must not break on a new field)."""
    schemas = Schemas()
    schemas.of(Answer)
    answer = schemas.components["Answer"]
    assert answer["required"] == ["id"]
    assert set(answer["properties"]) == {"id", "note"}
    assert "additionalProperties" not in answer


def test_a_recursive_type_refers_to_itself():
    """A type that holds itself is one named schema whose field refers back to it."""
    schemas = Schemas()
    schemas.of(Node)
    assert schemas.components["Node"]["properties"]["children"]["items"] == {
        "$ref": "#/components/schemas/Node"}


def test_a_route_that_fills_in_a_field_gets_a_variant_without_it_required():
    """`defaulted`: a variant of the body, named after the fields, that does not require
    them; the body itself still does."""
    schemas = Schemas()
    assert schemas.of(Body, defaulted=("name",)) == {
        "$ref": "#/components/schemas/BodyWithNameDefaulted"}
    assert "required" not in schemas.components["BodyWithNameDefaulted"]
    assert schemas.components["Body"]["required"] == ["name"]


def test_refinements_add_what_the_type_cannot_say():
    """A refinement keyed by (class, field) is merged into that field's schema."""
    schemas = Schemas({(Body, "count"): {"minimum": 1, "maximum": 9}})
    schemas.of(Body)
    assert schemas.components["Body"]["properties"]["count"] == {
        "type": "integer", "minimum": 1, "maximum": 9, "default": 3}


def test_two_types_of_one_name_and_unknown_types_are_refused():
    """Names are the document's keys: a second type under a taken name is an error, as is
    a type with no JSON Schema."""
    schemas = Schemas()
    schemas.of(Body)
    Other = attrs.make_class("Body", {"x": attrs.field()})
    with pytest.raises(TypeError, match="two types are named Body"):
        schemas.of(Other)
    with pytest.raises(TypeError, match="no JSON Schema"):
        schemas.of(bytes)
