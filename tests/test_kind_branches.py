"""Code kinds own every form of their codes: nothing outside them asks which kind it holds.

An AST scan of the core, the plugins and the benchmarks: outside ``adaptemb/codes/`` (the kinds), the index backends
(``adaptemb/index/``, one per (query kind, document kind)) and the plugins (which own their kinds), no code
branches on a code kind: no comparison of a ``kind`` / ``*_kind`` / ``*_form`` value with a code kind's name
(``codes.kind == "binary"``, ``vector_form == "sparse"``, ``kind in ("dense", "int8")``) and no
``isinstance`` / ``issubclass`` test against a kind's class (``isinstance(x, BinaryCodes)``; the base ``Codes``
is not a kind). ``adaptemb/inputs.py`` is the home of the *input* kinds (``float``, ``int8``, ``ubinary``),
which are not code kinds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import adaptemb
from adaptemb import Codes

ROOT = Path(__file__).resolve().parents[1]
OWNERS = ("adaptemb/codes/", "adaptemb/index/", "plugins/", "adaptemb/inputs.py")


def _code_kinds() -> set[str]:
    adaptemb.get_registry()  # plugins are loaded: they define kinds too
    return set(Codes.known_kinds())


def _names_a_kind_holder(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    return name is not None and (name == "kind" or name.endswith(("_kind", "_form")))


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(element) for element in node.elts))
    return set()


def _class_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _class_names(element)]
    return [node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""]


def kind_branches(source: str, kinds: set[str]) -> list[int]:
    """The lines of ``source`` that branch on a code kind (see the module docstring)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass"):
            classes = _class_names(node.args[1]) if len(node.args) == 2 else []
            if any(name.endswith("Codes") and name != "Codes" or name == "ProjectedQueries" for name in classes):
                lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_kind_holder(side) for side in sides) and any(_strings(side) & kinds for side in sides):
                lines.append(node.lineno)
    return sorted(lines)


@pytest.mark.slow
def test_no_module_outside_the_kinds_branches_on_a_code_kind() -> None:
    kinds = _code_kinds()
    assert {"dense", "sparse", "binary", "int8", "binary_sparse", "packed_sparse", "projected"} <= kinds
    found = {}
    for folder in ("adaptemb", "plugins", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if not where.startswith(OWNERS) and (lines := kind_branches(path.read_text(), kinds)):
                found[where] = lines
    assert not found, f"branches on a code kind outside the kinds (file: lines): {found}"


def test_the_scan_sees_each_form_of_a_kind_branch() -> None:
    kinds = {"binary", "sparse", "int8", "dense"}
    for line in ('if codes.kind == "binary": pass', 'x = codes.vector_form == "sparse"', 'y = kind in ("dense", "int8")',
                 "ok = isinstance(codes, BinaryCodes)", "ok = isinstance(q, (adaptemb.DenseCodes, Codes))",
                 'z = "int8" != doc_kind', "ok = issubclass(cls, ProjectedQueries)"):
        assert kind_branches(line, kinds) == [1], line
    for line in ("ok = isinstance(codes, Codes)", 'if rotation.kind == "hadamard": pass', 'if name == "binary": pass',
                 "same = codes.kind == other.kind"):
        assert kind_branches(line, kinds) == [], line
