"""Unsafe Python in shipped code, found on the syntax tree (not by grepping text).

Working on the AST is what keeps the check precise: a test that writes ``"shell=True"``
into a string, or a document describing the rule, contains no call, so it is not flagged;
an aliased import (``import yaml as y; y.load(...)``) is still resolved and caught.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Iterator

from memtune.lint.findings import Finding, error, warning


@dataclass(frozen=True)
class PyRules:
    network_modules: frozenset[str]
    shell_calls: frozenset[str]
    code_exec_builtins: frozenset[str]
    yaml_unsafe_calls: frozenset[str]
    yaml_load_calls: frozenset[str]
    yaml_safe_loaders: frozenset[str]

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> "PyRules":
        return cls(*(frozenset(table[key]) for key in (
            "network_modules", "shell_calls", "code_exec_builtins",
            "yaml_unsafe_calls", "yaml_load_calls", "yaml_safe_loaders",
        )))

    def is_network(self, dotted: str) -> bool:
        return any(dotted == mod or dotted.startswith(mod + ".") for mod in self.network_modules)


def scan(source: str, label: str, rules: PyRules) -> list[Finding]:
    try:
        tree = ast.parse(source, filename=label)
    except SyntaxError as exc:
        return [warning("security/python-unparsed", f"could not parse as Python ({exc.msg}); its code was not checked",
                        "fix the syntax error", label, exc.lineno)]
    aliases = _aliases(tree)
    findings: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            findings += _check_import(node, label, rules)
        elif isinstance(node, ast.Call):
            findings += _check_call(node, aliases, label, rules)
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


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _qualified(node: ast.AST, aliases: dict[str, str]) -> str | None:
    dotted = _dotted(node)
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    base = aliases.get(head, head)
    return f"{base}.{rest}" if rest else base


def _check_import(node: ast.Import | ast.ImportFrom, label: str, rules: PyRules) -> list[Finding]:
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif node.module and node.level == 0:
        modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        return []
    hits = sorted({m for m in modules if rules.is_network(m)})
    return [error("security/network", f"imports {hits[0]}: shipped code must not make network calls",
                  "remove the network access (the helpers work offline)", label, node.lineno)] if hits else []


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
                findings.append(error("security/shell-true", "subprocess call with shell=True",
                                      "pass the command as a list and drop shell=True", label, line))
        else:
            findings.append(warning("security/shell-true", "shell= is not a literal False; cannot prove no shell is used",
                                    "pass shell=False (or omit it)", label, line))
    if name is None:
        return findings
    if name in rules.code_exec_builtins and isinstance(node.func, ast.Name) and node.func.id not in aliases:
        findings.append(error("security/eval-exec", f"{name}() executes a string as code",
                              "parse the data (json/yaml.safe_load/ast.literal_eval) instead", label, line))
    elif name in rules.shell_calls:
        findings.append(error("security/shell-call", f"{name}() runs its argument through a shell",
                              "use subprocess.run([...]) with a list and no shell", label, line))
    elif name in rules.yaml_unsafe_calls:
        findings.append(error("security/yaml-load", f"{name}() can construct arbitrary Python objects",
                              "use yaml.safe_load", label, line))
    elif name in rules.yaml_load_calls:
        findings += _check_yaml_loader(node, name, aliases, label, rules)
    elif name in ("__import__", "importlib.import_module") and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and rules.is_network(first.value):
            findings.append(error("security/network", f"imports {first.value} dynamically: shipped code must not make network calls",
                                  "remove the network access", label, line))
    elif rules.is_network(name):
        findings.append(error("security/network", f"calls {name}(): shipped code must not make network calls",
                              "remove the network access", label, line))
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
        return [error("security/yaml-load", f"{name}() with {qualified} can construct arbitrary Python objects",
                      "use yaml.safe_load or Loader=yaml.SafeLoader", label, node.lineno)]
    return [warning("security/yaml-load", f"{name}() with a Loader this check cannot identify",
                    "use yaml.safe_load or Loader=yaml.SafeLoader", label, node.lineno)]


def iter_python_sources(files: list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """(label, text) pairs that are Python: *.py, or a python shebang on line 1."""
    for label, text in files:
        if label.endswith(".py") or (text.startswith("#!") and "python" in text.split("\n", 1)[0]):
            yield label, text
