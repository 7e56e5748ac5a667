"""Shape rules a newcomer relies on: small modules, and a typed CLI boundary.

Both are read from the source as text (the line count) or as a syntax tree (the ``Any``
annotations), so they hold for every module, not only the ones a test happens to import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent.parent / "scripts" / "memtune"
MAX_LINES = 700
#: Modules allowed past the cap until their owners split them (none today).
OVER_CAP: dict[str, int] = {}


def _any_annotations(path: Path) -> int:
    """How many annotations in ``path`` name ``typing.Any`` (docstrings and comments do not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    annotations: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            annotations.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            annotations.append(node.returns)
    count = 0
    for annotation in annotations:
        for sub in ast.walk(annotation):
            if isinstance(sub, ast.Name) and sub.id == "Any":
                count += 1
            elif isinstance(sub, ast.Attribute) and sub.attr == "Any":
                count += 1
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                count += len(re.findall(r"\bAny\b", sub.value))  # a quoted annotation
    return count


def test_no_module_over_the_line_cap() -> None:
    over = {
        str(p.relative_to(LIBRARY)): n
        for p in sorted(LIBRARY.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    grown = {name: n for name, n in over.items() if n > OVER_CAP.get(name, MAX_LINES)}
    assert not grown, f"split these modules by job (cap {MAX_LINES} lines): {grown}"


def test_commands_have_no_any_annotations() -> None:
    counts = {p.name: _any_annotations(p) for p in sorted((LIBRARY / "commands").glob("*.py"))}
    over = {name: n for name, n in counts.items() if n}
    assert not over, f"type the CLI boundary (TYPE_CHECKING imports, as commands/options.py does): {over}"


def test_the_any_counter_sees_annotations_not_prose(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Any text here is prose."""\n'
        "from typing import Any\n"
        "import typing\n"
        "def f(a: Any, *rest: typing.Any, **kw: Any) -> dict[str, Any]:\n"
        "    x: list[Any] = []  # Any in a comment\n"
        "    y: 'Any' = None\n"
        "    return {}\n"
        "def g(a: object) -> int:\n"
        "    return 1\n",
        encoding="utf-8",
    )
    assert _any_annotations(sample) == 6
