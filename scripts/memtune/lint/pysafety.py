"""Unsafe Python in shipped code, found on the syntax tree (not by grepping text).

Working on the AST is what keeps the check precise: a test that writes ``"shell=True"``
into a string, or a document describing the rule, contains no call, so it is not flagged;
an aliased import (``import yaml as y; y.load(...)``) is still resolved and caught, and so
are the usual disguises: ``__import__("os").system``, ``getattr(os, "sys" + "tem")``,
``getattr(builtins, "ex" + "ec")``. A lookup on a sensitive module by a name that cannot be
worked out from literals is an error in itself: shipped code has no reason to hide a name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memtune.lint.findings import Finding, error, warning


@dataclass(frozen=True)
class PyRules:
    network_modules: frozenset[str]
    shell_calls: frozenset[str]
    code_exec_builtins: frozenset[str]
    yaml_unsafe_calls: frozenset[str]
    yaml_load_calls: frozenset[str]
    yaml_safe_loaders: frozenset[str]
    process_calls: frozenset[str] = frozenset()
    code_load_calls: frozenset[str] = frozenset()
    reflective_modules: frozenset[str] = frozenset()

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> PyRules:
        return cls(
            *(
                frozenset(table.get(key, ()))
                for key in (
                    "network_modules",
                    "shell_calls",
                    "code_exec_builtins",
                    "yaml_unsafe_calls",
                    "yaml_load_calls",
                    "yaml_safe_loaders",
                    "process_calls",
                    "code_load_calls",
                    "reflective_modules",
                )
            )
        )

    def is_network(self, dotted: str) -> bool:
        return any(dotted == mod or dotted.startswith(mod + ".") for mod in self.network_modules)


def scan(source: str, label: str, rules: PyRules) -> list[Finding]:
    try:
        tree = ast.parse(source, filename=label)
    except SyntaxError as exc:
        return [
            warning(
                "security/python-unparsed",
                f"could not parse as Python ({exc.msg}); its code was not checked",
                "fix the syntax error",
                label,
                exc.lineno,
            )
        ]
    aliases = _aliases(tree)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}  # getattr(...)(...) is judged as a call
    findings: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            findings += _check_import(node, label, rules)
        elif isinstance(node, ast.Call):
            findings += _check_call(node, aliases, label, rules)
            findings += _check_getattr(node, aliases, label, rules, id(node) in called)
    return findings


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> fully qualified name, from every import in the module."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _literal_text(node: ast.AST) -> str | None:
    """A string an expression always evaluates to, when it is built from literals only:
    ``"sys" + "tem"``, ``f"ex{'ec'}"``, ``"".join(["ev", "al"])``; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_text(node.left), _literal_text(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        pieces = [_literal_text(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
        return "".join(pieces) if all(p is not None for p in pieces) else None  # type: ignore[arg-type]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], (ast.List, ast.Tuple))
    ):
        sep = _literal_text(node.func.value)
        items = [_literal_text(e) for e in node.args[0].elts]
        return sep.join(items) if sep is not None and all(i is not None for i in items) else None  # type: ignore[arg-type]
    return None


def _imported_module(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``__import__("os")`` / ``importlib.import_module("os")`` -> ``"os"``."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    if _qualified(node.func, aliases) not in ("__import__", "builtins.__import__", "importlib.import_module"):
        return None
    return _literal_text(node.args[0])


def _getattr_parts(node: ast.AST, aliases: dict[str, str]) -> tuple[str, str | None] | None:
    """``getattr(obj, name)`` -> (qualified obj, literal name or None when computed)."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and "getattr" not in aliases
        and len(node.args) >= 2
    ):
        return None
    target = _qualified(node.args[0], aliases)
    return (target, _literal_text(node.args[1])) if target is not None else None


def _qualified(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The dotted name an expression refers to, through imports, aliases, ``__import__``
    and ``getattr`` with a literal name; None when it cannot be known."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        base = "builtins" if node.id == "__builtins__" else aliases.get(node.id, node.id)
    elif (module := _imported_module(node, aliases)) is not None:
        base = module
    elif (got := _getattr_parts(node, aliases)) is not None and got[1] is not None:
        base = f"{got[0]}.{got[1]}"
    else:
        return None
    return ".".join([base, *reversed(parts)])


def _check_getattr(node: ast.Call, aliases: dict[str, str], label: str, rules: PyRules, called: bool) -> list[Finding]:
    """``getattr`` on a sensitive module: a computed name hides what runs; a literal one
    is judged like the attribute written out (the call itself, if any, is judged too)."""
    got = _getattr_parts(node, aliases)
    if got is None:
        return []
    target, attr = got
    module = target.split(".")[0]
    if module not in rules.reflective_modules:
        return []
    if attr is None:
        return [
            error(
                "security/computed-attribute",
                f"getattr({target}, <computed name>) hides which function is used",
                "name the function directly",
                label,
                node.lineno,
            )
        ]
    name = f"{target}.{attr}"
    if _dangerous(name, rules) and not called:
        return [
            error(
                "security/computed-attribute",
                f"getattr({target}, {attr!r}) fetches {name}",
                "do not reach for process, shell or code-loading functions",
                label,
                node.lineno,
            )
        ]
    return []


def _dangerous(name: str, rules: PyRules) -> bool:
    builtin = name[len("builtins.") :] if name.startswith("builtins.") else None
    return (
        name in rules.shell_calls
        or name in rules.process_calls
        or name in rules.code_load_calls
        or (builtin is not None and builtin in rules.code_exec_builtins)
    )


def _check_import(node: ast.Import | ast.ImportFrom, label: str, rules: PyRules) -> list[Finding]:
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif node.module and node.level == 0:
        modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        return []
    hits = sorted({m for m in modules if rules.is_network(m)})
    return (
        [
            error(
                "security/network",
                f"imports {hits[0]}: shipped code must not make network calls",
                "remove the network access (the helpers work offline)",
                label,
                node.lineno,
            )
        ]
        if hits
        else []
    )


def _keyword(node: ast.Call, name: str) -> ast.keyword | None:
    return next((kw for kw in node.keywords if kw.arg == name), None)


def _check_call(node: ast.Call, aliases: dict[str, str], label: str, rules: PyRules) -> list[Finding]:
    findings: list[Finding] = []
    name = _qualified(node.func, aliases)
    line = node.lineno
    shell = _keyword(node, "shell")
    if shell is not None:
        value = shell.value
        if isinstance(value, ast.Constant):
            if value.value:
                findings.append(
                    error(
                        "security/shell-true",
                        "subprocess call with shell=True",
                        "pass the command as a list and drop shell=True",
                        label,
                        line,
                    )
                )
        else:
            findings.append(
                warning(
                    "security/shell-true",
                    "shell= is not a literal False; cannot prove no shell is used",
                    "pass shell=False (or omit it)",
                    label,
                    line,
                )
            )
    if name is None:
        return findings
    builtin = name[len("builtins.") :] if name.startswith("builtins.") else None
    if (name in rules.code_exec_builtins and isinstance(node.func, ast.Name) and node.func.id not in aliases) or (
        builtin is not None and builtin in rules.code_exec_builtins
    ):
        findings.append(
            error(
                "security/eval-exec",
                f"{name}() executes a string as code",
                "parse the data (json/yaml.safe_load/ast.literal_eval) instead",
                label,
                line,
            )
        )
    elif name in rules.shell_calls:
        findings.append(
            error(
                "security/shell-call",
                f"{name}() runs its argument through a shell",
                "use subprocess.run([...]) with a list and no shell",
                label,
                line,
            )
        )
    elif name in rules.process_calls:
        findings.append(
            error(
                "security/process-call",
                f"{name}() starts or replaces a process",
                "use subprocess.run([...]) with a list, or nothing at all",
                label,
                line,
            )
        )
    elif name in rules.code_load_calls:
        findings.append(
            error(
                "security/code-load",
                f"{name}() turns bytes into code or arbitrary objects",
                "store data as JSON or YAML and load it with json / yaml.safe_load",
                label,
                line,
            )
        )
    elif name in rules.yaml_unsafe_calls:
        findings.append(
            error(
                "security/yaml-load",
                f"{name}() can construct arbitrary Python objects",
                "use yaml.safe_load",
                label,
                line,
            )
        )
    elif name in rules.yaml_load_calls:
        findings += _check_yaml_loader(node, name, aliases, label, rules)
    elif name in ("__import__", "importlib.import_module") and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and rules.is_network(first.value):
            findings.append(
                error(
                    "security/network",
                    f"imports {first.value} dynamically: shipped code must not make network calls",
                    "remove the network access",
                    label,
                    line,
                )
            )
    elif rules.is_network(name):
        findings.append(
            error(
                "security/network",
                f"calls {name}(): shipped code must not make network calls",
                "remove the network access",
                label,
                line,
            )
        )
    return findings


def _check_yaml_loader(node: ast.Call, name: str, aliases: dict[str, str], label: str, rules: PyRules) -> list[Finding]:
    loader_kw = _keyword(node, "Loader")
    loader = loader_kw.value if loader_kw is not None else (node.args[1] if len(node.args) > 1 else None)
    if loader is None:
        return [error("security/yaml-load", f"{name}() without a Loader", "use yaml.safe_load", label, node.lineno)]
    qualified = _qualified(loader, aliases)
    if qualified in rules.yaml_safe_loaders:
        return []
    if qualified is not None and qualified.startswith("yaml."):
        return [
            error(
                "security/yaml-load",
                f"{name}() with {qualified} can construct arbitrary Python objects",
                "use yaml.safe_load or Loader=yaml.SafeLoader",
                label,
                node.lineno,
            )
        ]
    return [
        warning(
            "security/yaml-load",
            f"{name}() with a Loader this check cannot identify",
            "use yaml.safe_load or Loader=yaml.SafeLoader",
            label,
            node.lineno,
        )
    ]


def iter_python_sources(files: list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """(label, text) pairs that are Python: *.py, or a python shebang on line 1."""
    for label, text in files:
        if label.endswith(".py") or (text.startswith("#!") and "python" in text.split("\n", 1)[0]):
            yield label, text
