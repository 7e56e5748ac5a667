"""Markdown structure the checks need — headings, tables, links — via markdown-it-py.

Parsing (instead of grepping for ``## ``) keeps headings inside code fences and ``|``
characters inside code spans from fooling the checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    line: int  # 1-based


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    line: int
    section: str  # text of the nearest heading above the table ("" before any)


@dataclass(frozen=True)
class Link:
    target: str
    line: int
    kind: str  # "link" or "image"


def tokens(text: str) -> list[Any]:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").parse(text)


def _line(token: Any, offset: int) -> int:
    return (token.map[0] + 1 + offset) if token.map else offset + 1


def headings(toks: list[Any], offset: int = 0) -> list[Heading]:
    """Every ATX/setext heading; ``offset`` shifts line numbers (a body after frontmatter)."""
    found = []
    for index, token in enumerate(toks):
        if token.type == "heading_open":
            inline = toks[index + 1]
            found.append(Heading(int(token.tag[1]), inline.content.strip(), _line(token, offset)))
    return found


def tables(toks: list[Any], offset: int = 0) -> list[Table]:
    found: list[Table] = []
    section = ""
    index = 0
    while index < len(toks):
        token = toks[index]
        if token.type == "heading_open":
            section = toks[index + 1].content.strip()
        if token.type == "table_open":
            header: list[str] = []
            rows: list[tuple[str, ...]] = []
            current: list[str] = []
            in_head = False
            start = token
            index += 1
            while toks[index].type != "table_close":
                kind = toks[index].type
                if kind == "thead_open":
                    in_head = True
                elif kind == "thead_close":
                    in_head = False
                elif kind == "tr_open":
                    current = []
                elif kind == "inline":
                    current.append(toks[index].content.strip())
                elif kind == "tr_close":
                    if in_head:
                        header = current
                    else:
                        rows.append(tuple(current))
                index += 1
            found.append(Table(tuple(header), tuple(rows), _line(start, offset), section))
        index += 1
    return found


def links(toks: list[Any], offset: int = 0) -> list[Link]:
    """Inline, reference-style and image links (markdown-it resolves reference definitions)."""
    found = []
    for token in toks:
        if token.type != "inline" or not token.children:
            continue
        line = _line(token, offset)
        for child in token.children:
            if child.type == "link_open":
                found.append(Link(str(child.attrGet("href") or ""), line, "link"))
            elif child.type == "image":
                found.append(Link(str(child.attrGet("src") or ""), line, "image"))
    return found


def slug(text: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(found: list[Heading]) -> set[str]:
    """All anchors GitHub generates for these headings (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in found:
        base = slug(heading.text)
        count = seen.get(base, 0)
        result.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return result
