"""Nothing outside model/families decides by a family's name: a comparison of anything with
a family's name (`== "harmony"`, `!= "hermes"`, `in ("kimi_k2", ...)`, a `case "glm47":`) is
a family's own business, to be asked of its `Family` object."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from triode.model.families import ALIASES, format_names

SRC = Path(__file__).resolve().parents[3] / "src" / "triode"
FAMILIES = SRC / "model" / "families"
# `none` is also a tool_choice mode, a BLAS mode...: it counts next to a family or format.
AMBIGUOUS = {"none"}


def names() -> set[str]:
    return set(format_names()) | set(ALIASES)


def switches(source: str) -> list[str]:
    """The comparisons in `source` that decide by a family's name, as source lines."""
    known, found = names(), []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            context = ast.unparse(node)
            for operand in operands:
                values = [operand] if isinstance(operand, ast.Constant) else \
                    list(operand.elts) if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) \
                    else []
                for value in values:
                    if isinstance(value, ast.Constant) and value.value in known and (
                            value.value not in AMBIGUOUS
                            or "family" in context or "format" in context):
                        found.append(context)
            equality = any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                           for op in node.ops)
            if equality and ("family.name" in context or ".tool_format" in context):
                found.append(context)
        elif isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant) \
                and node.value.value in known - AMBIGUOUS:
            found.append(f"case {node.value.value!r}")
    return found


def test_the_check_sees_each_way_of_switching():
    assert switches('if self.info.tool_format == "harmony": pass')
    assert switches('x = tool_format != "hermes"')
    assert switches('x = fmt in ("glm47", "laguna")')
    assert switches('x = info.family.name == name')
    assert switches('match fmt:\n    case "kimi_k2": pass')
    assert switches('x = tool_format == "none"')
    assert switches('x = self.info.tool_format == GENERIC')
    assert not switches('x = choice.mode != "none"')
    assert not switches('x = options.tool_format is not None')
    assert not switches('x = {"glm47": 1}["glm47"]')


@pytest.mark.parametrize("path", sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")
                                        if FAMILIES not in p.parents))
def test_no_module_outside_the_families_switches_on_a_family_name(path):
    assert switches((SRC / path).read_text(encoding="utf-8")) == []
