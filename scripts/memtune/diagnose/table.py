"""SKILL.md's "Failure Diagnosis" table, read with markdown-it-py at run time.

The table is the one source of truth: the agent reads it in SKILL.md and diagnose.py
quotes the same rows, so a fix edited there is what every diagnosis prints.  Each
diagnosis kind maps to exactly one row through a key phrase kept in
data/oom_patterns.yaml (``table_key``) that must occur in that row's Symptom cell and in
no other; :func:`row_for_kind` refuses an ambiguous or missing mapping.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memtune.errors import InputError
from memtune.files.paths import SKILL_MD

if TYPE_CHECKING:  # markdown_it itself is imported lazily: --help must work without it
    from markdown_it.token import Token

SECTION = "Failure Diagnosis"
COLUMNS = ("Symptom", "Cause", "Confirm", "Fix")


@dataclass(frozen=True)
class Row:
    """One table row: ``*_md`` keep the Markdown (code spans), ``symptom`` is plain text."""

    index: int
    symptom: str
    symptom_md: str
    cause_md: str
    confirm_md: str
    fix_md: str


class TableError(InputError):
    """SKILL.md lacks a well-formed Failure Diagnosis table (one line, exit 2)."""


def _plain(inline: Token) -> str:  # of type "inline"
    parts = []
    for child in inline.children or ():
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return re.sub(r"\s+", " ", "".join(parts)).strip()


def load_rows(skill_md: Path = SKILL_MD) -> list[Row]:
    """The rows of the first table under ``## Failure Diagnosis`` (before the next ``##``)."""
    try:
        source = skill_md.read_text(encoding="utf-8")
    except OSError as exc:
        raise TableError(f"{skill_md}: cannot read the skill file ({exc.strerror or exc})") from exc
    return simple_rows(source) or markdown_rows(source, skill_md)


# Markdown that would make a cell's plain text differ from its source minus backticks:
# emphasis, links, HTML, entities, escapes other than the table's own ``\|``.
_NOT_SIMPLE = re.compile(r"[*_\[\]<&!~]|\\(?!\|)")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_DELIMITER = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+$")


def simple_rows(source: str) -> list[Row] | None:
    """The table read line by line, when it is a plain GFM table of text and code spans (what
    SKILL.md holds); None for anything else, which :func:`markdown_rows` then reads.

    Why not always markdown-it: importing it is most of the time diagnose.py spends on the
    table, and every run pays it.  tests/test_diagnosis_table.py checks both readers agree.
    """
    lines = source.splitlines()
    fence = False
    start = None
    for i, line in enumerate(lines):
        if line.startswith(("```", "~~~")):
            fence = not fence
        elif not fence and line.rstrip() == f"## {SECTION}":
            if start is not None:
                return None
            start = i
    if start is None or fence:
        return None
    table = []
    i = start + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    while i < len(lines) and lines[i].startswith("|"):
        table.append(lines[i].rstrip())
        i += 1
    if len(table) < 3 or not _DELIMITER.match(table[1].replace(" ", "")):
        return None
    if i < len(lines) and lines[i].strip() and not lines[i].startswith("#"):
        return None  # text right under the table: let the full reader decide where it ends
    split = [_cells(line) for line in table]
    if any(c is None for c in split) or [_simple_plain(c) for c in split[0] or ()] != list(COLUMNS):
        return None
    rows: list[Row] = []
    for cells in split[2:]:
        if cells is None or len(cells) != len(COLUMNS):
            return None  # GFM pads a short row and cuts a long one: markdown-it's business
        rows.append(
            Row(
                index=len(rows),
                symptom=_simple_plain(cells[0]),
                symptom_md=cells[0],
                cause_md=cells[1],
                confirm_md=cells[2],
                fix_md=cells[3],
            )
        )
    return rows or None


def _cells(line: str) -> list[str] | None:
    if not line.endswith("|") or line.endswith("\\|"):
        return None
    cells = [c.strip() for c in _CELL_SPLIT.split(line[1:-1])]
    for cell in cells:
        if cell.count("`") % 2 or "``" in cell or _NOT_SIMPLE.search(re.sub(r"`[^`]*`", "", cell)):
            return None
    return [c.replace("\\|", "|") for c in cells]  # the table's escape, also inside code spans (GFM)


def _simple_plain(cell: str) -> str:
    return re.sub(r"\s+", " ", cell.replace("`", "")).strip()


def markdown_rows(source: str, skill_md: Path = SKILL_MD) -> list[Row]:
    """The table as markdown-it reads it (any Markdown a cell may hold)."""
    from markdown_it import MarkdownIt  # lazy: --help must work without it

    tokens = MarkdownIt("commonmark").enable("table").parse(source)
    in_section = False
    header: list[str] = []
    cells: list[Token] = []
    rows: list[Row] = []
    in_table = in_head = False
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.tag == "h2":
            title = tokens[i + 1].content.strip()
            if in_section and (rows or in_table):
                break
            in_section = title == SECTION
            continue
        if not in_section:
            continue
        if tok.type == "table_open":
            if rows:
                break
            in_table = True
        elif tok.type == "table_close" and in_table:
            break
        elif not in_table:
            continue
        elif tok.type == "thead_open":
            in_head = True
        elif tok.type == "thead_close":
            in_head = False
        elif tok.type == "tr_open":
            cells = []
        elif tok.type == "inline":
            cells.append(tok)
        elif tok.type == "tr_close":
            if in_head:
                header = [_plain(c) for c in cells]
            elif len(cells) == len(COLUMNS):
                rows.append(
                    Row(
                        index=len(rows),
                        symptom=_plain(cells[0]),
                        symptom_md=cells[0].content.strip(),
                        cause_md=cells[1].content.strip(),
                        confirm_md=cells[2].content.strip(),
                        fix_md=cells[3].content.strip(),
                    )
                )
    if tuple(header) != COLUMNS:
        found = " | ".join(header) if header else "no table"
        raise TableError(
            f"{skill_md}: the '## {SECTION}' section needs a table with columns {' | '.join(COLUMNS)} (found: {found})"
        )
    if not rows:
        raise TableError(f"{skill_md}: the '## {SECTION}' table has no rows")
    return rows


def rows_matching(rows: list[Row], key: str) -> list[Row]:
    return [r for r in rows if key in r.symptom]


def row_for_kind(rows: list[Row], kind: str, key: str) -> Row:
    """The single row whose Symptom contains ``key``; a one-line error otherwise."""
    hits = rows_matching(rows, key)
    if len(hits) != 1:
        what = "no row" if not hits else f"{len(hits)} rows"
        raise TableError(
            f"SKILL.md '## {SECTION}': kind {kind!r} (key phrase {key!r}) matches {what}; "
            "each kind must match exactly one Symptom cell"
        )
    return hits[0]


# --------------------------------------------------------------------------- symptom lookup

_STOP = frozenset(
    "a an and are as at be by for from i if in into is it its my of on or the then this to was "
    "when where while with without my our after before during".split()
)
# Words people type versus words the table uses.
_SYNONYMS = {
    "oom": ("out", "memory"),
    "ooms": ("out", "memory"),
    "oomed": ("out", "memory"),
    "fragmented": ("fragmentation",),
    "fragment": ("fragmentation",),
    "vpp": ("virtual", "pipeline"),
    "pp": ("pipeline",),
    "offload": ("offloading",),
    "cudagraph": ("cuda", "graphs"),
    "cudagraphs": ("cuda", "graphs"),
    "graph": ("graphs",),
    "microbatch": ("micro", "batches"),
    "microbatches": ("micro", "batches"),
    "lora": ("lora", "peft"),
    "nccl_ub": ("nccl", "ub"),
    "gpu": ("gpu", "rank"),
}


def _tokens(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9_]+", text.lower().replace("-", " "))
    out: list[str] = []
    for w in words:
        if w in _STOP:
            continue
        out.extend(_SYNONYMS.get(w, (w,)))
        if "_" in w:  # CUBLAS_STATUS_ALLOC_FAILED should answer to "cublas alloc failed"
            out.extend(p for p in w.split("_") if p and p not in _STOP)
    return out


def _word_score(query_words: list[str], target_words: set[str]) -> float:
    """Share of query words found in the target, allowing near-misses (typos, plurals)."""
    if not query_words:
        return 0.0
    total = 0.0
    pool = list(target_words)
    for w in query_words:
        if w in target_words:
            total += 1.0
            continue
        close = difflib.get_close_matches(w, pool, n=1, cutoff=0.8)
        if close:
            total += 0.7
        elif len(w) >= 4 and any(t.startswith(w) or w.startswith(t) for t in pool if len(t) >= 4):
            total += 0.5
    return total / len(query_words)


@dataclass(frozen=True)
class Match:
    row: Row
    score: float


def lookup_symptom(rows: list[Row], query: str, limit: int = 3) -> list[Match]:
    """Rows ranked by how well ``query`` matches Symptom (mostly) and Cause (a little)."""
    q = _tokens(query)
    scored = []
    for row in rows:
        symptom_words = set(_tokens(row.symptom))
        cause_words = set(_tokens(re.sub(r"`", "", row.cause_md)))
        score = 0.75 * _word_score(q, symptom_words) + 0.25 * _word_score(q, cause_words)
        ratio = difflib.SequenceMatcher(None, query.lower(), row.symptom.lower()).ratio()
        score = round(score + 0.1 * ratio, 4)
        if score > 0.15:
            scored.append(Match(row, score))
    scored.sort(key=lambda m: (-m.score, m.row.index))
    return scored[:limit]
