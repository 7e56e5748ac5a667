"""Every relative link in the package's Markdown resolves to a file inside the package.

An agent follows these links to load references on demand (progressive disclosure); a
broken one silently hides the material. External links (with a scheme) are not fetched:
the linter never touches the network.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from memtune.lint import markdown
from memtune.lint.findings import Finding, error, warning
from memtune.lint.package import Package

SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def markdown_files(package: Package, patterns: list[str]) -> list[Path]:
    found: set[Path] = set()
    for pattern in patterns:
        found.update(p for p in package.root.glob(pattern) if p.is_file())
    return sorted(found)


def check(package: Package, rules: dict[str, Any]) -> list[Finding]:
    findings: list[Finding] = []
    anchor_cache: dict[Path, set[str]] = {}
    graph: dict[Path, set[Path]] = {}
    root = package.root.resolve()
    for source in markdown_files(package, rules["files"]):
        label = package.rel(source)
        toks = markdown.tokens(source.read_text(encoding="utf-8", errors="replace"))
        anchor_cache[source.resolve()] = markdown.anchors(markdown.headings(toks))
        targets = graph.setdefault(source.resolve(), set())
        for link in markdown.links(toks):
            findings += _check_link(link, source, label, root, anchor_cache)
            resolved = _local_target(link.target, source)
            if resolved is not None:
                targets.add(resolved)
    return findings + _orphans(package, graph, rules)


def _local_target(target: str, source: Path) -> Path | None:
    target = target.strip()
    if not target or SCHEME.match(target) or target.startswith(("//", "/", "#")):
        return None
    return (source.parent / unquote(target.partition("#")[0].split("?", 1)[0])).resolve()


def _orphans(package: Package, graph: dict[Path, set[Path]], rules: dict[str, Any]) -> list[Finding]:
    """Reference files no chain of links from SKILL.md reaches: an agent would never open them."""
    start = (package.root / rules["entry"]).resolve()
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return [
        warning(
            "links/orphan-reference",
            f"{package.rel(path)} is not reachable by links from {rules['entry']}",
            f"link it from {rules['entry']} (or from a reference that is linked)",
            package.rel(path),
        )
        for path in markdown_files(package, rules["must_be_linked"])
        if path.resolve() not in seen
    ]


def _check_link(
    link: markdown.Link, source: Path, label: str, root: Path, anchor_cache: dict[Path, set[str]]
) -> list[Finding]:
    target = link.target.strip()
    if not target or SCHEME.match(target) or target.startswith("//"):
        return []
    path_part, _, fragment = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if path_part.startswith("/"):
        return [
            warning(
                "links/absolute",
                f"link '{target}' is an absolute path, which breaks in an installed copy",
                "use a path relative to this file",
                label,
                link.line,
            )
        ]
    resolved = (source.parent / path_part).resolve() if path_part else source.resolve()
    if resolved != root and root not in resolved.parents:
        return [
            error(
                "links/outside-package",
                f"link '{target}' points outside the package",
                "link only files that ship with the skill",
                label,
                link.line,
            )
        ]
    if not resolved.exists():
        return [
            error(
                "links/unresolved",
                f"link '{target}' does not resolve: {path_part} does not exist",
                "fix the path or add the file",
                label,
                link.line,
            )
        ]
    if fragment and resolved.suffix.lower() == ".md" and resolved.is_file():
        if resolved not in anchor_cache:
            anchor_cache[resolved] = markdown.anchors(
                markdown.headings(markdown.tokens(resolved.read_text(encoding="utf-8", errors="replace")))
            )
        if unquote(fragment).lower() not in anchor_cache[resolved]:
            return [
                error(
                    "links/anchor",
                    f"link '{target}': no heading in {path_part or label} has the anchor #{fragment}",
                    "point at an existing heading",
                    label,
                    link.line,
                )
            ]
    return []
