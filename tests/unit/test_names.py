"""One name, one meaning (issue #24): no two classes or type aliases of `src/` share a name,
and none shadows a builtin.

Bug caught: two `Peers`, three `LeaseLost`, two `Progress`, `Page` and `Outcome` each defined in
two modules, and a `Warning` that shadowed the builtin; a reader who met one took it for the
other (and `except Warning` caught the wrong thing).
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "messageweave"


def _defined_names() -> dict[str, list[str]]:
    """Every top-level class and type alias (`X = Literal[...]`, `X = A | B`...) → where."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        module = str(path.relative_to(SRC))
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(module)
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name) and node.targets[0].id[:1].isupper()
                  and not node.targets[0].id.isupper()
                  and isinstance(node.value, ast.Subscript | ast.BinOp)):
                where[node.targets[0].id].append(module)
    return where


def test_no_two_classes_or_type_aliases_share_a_name() -> None:
    twice = {name: places for name, places in _defined_names().items() if len(places) > 1}
    assert twice == {}


def test_no_class_shadows_a_builtin() -> None:
    shadowing = {name: places for name, places in _defined_names().items()
                 if hasattr(builtins, name)}
    assert shadowing == {}
