"""The library's layout holds: pipeline groups import each other without cycles, the
library never reaches into the CLI layer, and argparse stays where it is allowed.

Imports are read with ``ast`` (nothing is imported), including the lazy imports inside
functions: a lazy import is still a dependency, only a later one. A group is the first
package under ``memtune`` (``memtune.diagnose.scan`` -> ``diagnose``); ``cli``,
``commands`` and ``bootstrap`` together are the CLI layer, which may import anything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "scripts" / "memtune"

CLI_LAYER = frozenset({"cli", "commands", "bootstrap"})
#: Every group a library module may belong to; a new top-level module or package must be
#: placed in one on purpose (the test below fails until it is named here).
LIBRARY_GROUPS = frozenset(
    {
        "spec",
        "readers",
        "estimate",
        "diagnose",
        "runtime",
        "check",
        "release",
        "bench",
        "lint",
        "files",
        "errors",
        "units",
    }
)

#: Files (relative to the repository) that may import argparse: none. Every helper, the
#: JSON reference generator and the benchmarks parse their command line with click.
ARGPARSE_ALLOWED: frozenset[str] = frozenset()


@cache
def parse(source: str) -> ast.Module:
    """The syntax tree of ``source``, parsed once per test session (several tests walk every file)."""
    return ast.parse(source)


def module_name(path: Path) -> str:
    """``scripts/memtune/diagnose/scan.py`` -> ``memtune.diagnose.scan``."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module ``source`` imports, as dotted names; ``from memtune import x`` names ``memtune.x``.

    ``from pkg import name`` also yields ``pkg.name``: the name may be a submodule, and
    when it is an attribute the extra entry maps to the same group as ``pkg`` anyway.
    """
    found: set[str] = set()
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")
                keep = len(base) - node.level + (1 if is_package else 0)
                prefix = ".".join(base[:keep])
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def group_of(module: str) -> str | None:
    """The group of a ``memtune`` module; None for other packages and ``memtune`` itself."""
    parts = module.split(".")
    if parts[0] != "memtune" or len(parts) < 2:
        return None
    return "cli" if parts[1] in CLI_LAYER else parts[1]


def library_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "data" not in p.relative_to(PACKAGE).parts)


@lru_cache(maxsize=1)
def module_imports() -> dict[str, set[str]]:
    """memtune module -> the memtune modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in library_files():
        name = module_name(path)
        imports = imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py")
        graph[name] = {m for m in imports if m.split(".")[0] == "memtune"}
    return graph


def group_graph(imports: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Group -> the other groups its modules import (self-imports dropped)."""
    graph: dict[str, set[str]] = {}
    for module, targets in imports.items():
        source = group_of(module)
        if source is None:
            continue
        edges = graph.setdefault(source, set())
        for target in targets:
            group = group_of(target)
            if group is not None and group != source:
                edges.add(group)
    return graph


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle in ``graph`` as [a, b, ..., a], or None when the graph is acyclic."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


# ---------------------------------------------------------------- the checker itself


def test_find_cycle_reports_a_synthetic_cycle() -> None:
    graph = {"spec": {"files"}, "readers": {"spec", "diagnose"}, "diagnose": {"estimate"}, "estimate": {"readers"}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert set(cycle) == {"readers", "diagnose", "estimate"}


def test_find_cycle_accepts_a_layered_graph() -> None:
    assert (
        find_cycle({"check": {"readers", "estimate"}, "estimate": {"spec"}, "readers": {"spec"}, "spec": set()}) is None
    )


def test_group_graph_sees_lazy_and_from_package_imports() -> None:
    source = (
        "from memtune.spec import presets\n"
        "def f():\n"
        "    from memtune import cli\n"
        "    import memtune.diagnose.scan\n"
        "from memtune.errors import InputError\n"
    )
    imports = imported_modules(source, "memtune.readers.example")
    graph = group_graph({"memtune.readers.example": imports})
    assert graph == {"readers": {"spec", "cli", "diagnose", "errors"}}


def test_relative_imports_resolve_to_their_group() -> None:
    imports = imported_modules("from ..spec import gpus\nfrom . import lexer\n", "memtune.readers.launch.commands")
    assert {"memtune.readers.spec.gpus", "memtune.readers.launch.lexer"} <= imports
    imports = imported_modules("from ..errors import InputError\n", "memtune.readers.hf_config")
    assert group_of(next(m for m in imports if m.endswith("errors"))) == "errors"


# ------------------------------------------------------------------- the package


def test_every_module_belongs_to_a_known_group() -> None:
    unknown = {
        module
        for module in module_imports()
        if (group := group_of(module)) is not None and group != "cli" and group not in LIBRARY_GROUPS
    }
    assert not unknown, f"modules outside every group (add the group to LIBRARY_GROUPS on purpose): {sorted(unknown)}"


def test_groups_import_each_other_without_cycles() -> None:
    graph = group_graph(module_imports())
    assert graph, "no imports found: the package path is wrong"
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle between groups: {' -> '.join(cycle or [])}"


def test_no_library_module_imports_the_cli_layer() -> None:
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in module_imports().items()
        if group_of(module) not in (None, "cli")
        for target in targets
        if group_of(target) == "cli"
    )
    assert not offenders, "the library must not import the CLI layer:\n" + "\n".join(offenders)


def test_argparse_only_where_allowed() -> None:
    users = set()
    for root in (REPO / "scripts", REPO / "benchmarks"):
        for path in root.rglob("*.py"):
            name = module_name(path) if PACKAGE in path.parents else path.stem
            if "argparse" in {m.split(".")[0] for m in imported_modules(path.read_text(encoding="utf-8"), name)}:
                users.add(path.relative_to(REPO).as_posix())
    assert users <= ARGPARSE_ALLOWED, f"argparse imported outside the allowed files: {sorted(users - ARGPARSE_ALLOWED)}"
    stale = ARGPARSE_ALLOWED - users
    assert not stale, f"these no longer import argparse: drop them from ARGPARSE_ALLOWED: {sorted(stale)}"


@pytest.mark.parametrize("group", sorted(LIBRARY_GROUPS - {"bench", "errors", "units"}))
def test_each_pipeline_group_exists_as_a_package(group: str) -> None:
    assert (PACKAGE / group / "__init__.py").is_file()


def test_input_error_and_exit_codes_are_imported_from_errors_only() -> None:
    """cli.py uses them but re-exports nothing: every importer names memtune.errors."""
    shared = {"InputError", "EXIT_OK", "EXIT_FINDINGS", "EXIT_USAGE"}
    offenders = []
    for root in (REPO / "scripts", REPO / "tests", REPO / "benchmarks"):
        for path in root.rglob("*.py"):
            for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == "memtune.cli":
                    offenders += [f"{path.relative_to(REPO)}: {a.name}" for a in node.names if a.name in shared]
    assert not offenders, "import these from memtune.errors:\n" + "\n".join(offenders)
