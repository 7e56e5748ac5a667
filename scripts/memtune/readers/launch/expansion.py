"""Variable bookkeeping between commands: assignments and the words arrays expand to.

The lexer leaves a ``\0NAME\0`` marker where bash would split a value into several
words (arrays, unquoted values with spaces); here such markers become the words of the
definition, each keeping the definition's line (that is the line a user edits).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from memtune.readers.launch.budget import _LEX_COST, _WORD_COST, _Budget
from memtune.readers.launch.lexer import _Lexer
from memtune.readers.launch.script import Span, Word, slice_spans

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")


def _remember(known: dict[str, str], lines: dict[str, Any], name: str, value: str, word: Word) -> None:
    """Record an assignment; for ``arr+=( ... )`` keep each part with its own line."""
    appended = "+=" in word.text.split("=", 1)[0] + "=" and isinstance(lines.get(name), list) and value.startswith("(")
    own = word.text.split("=", 1)[1] if "=" in word.text else ""
    if not appended and value.startswith("(") and value.endswith(")"):
        parts = _splice_self_reference(name, value[1:-1], word.line, lines.get(name))
        if parts is not None:
            lines[name] = parts
            known[name] = "(" + "\n".join(body for body, _ in parts) + ")"
            return
    if appended and own.startswith("("):
        lines[name] = list(lines[name]) + [(own[1:-1] if own.endswith(")") else own[1:], word.line)]
    elif value.startswith("(") and value.endswith(")"):
        lines[name] = [(value[1:-1], word.line)]
    else:
        lines[name] = word.line
    known[name] = value


def _splice_self_reference(name: str, body: str, line: int, old: Any) -> list[tuple[str, int]] | None:
    """``ARR=( "${ARR[@]}" --more )``: the new array's parts, with the old parts in place of
    the self-reference; None when the body does not mention itself.

    Arrays are expanded when used, not when defined, so without this the definition would
    refer to itself and every earlier element would be lost (Megatron-LM's FSDP examples
    extend TRAINING_ARGS this way). Bash evaluates the right-hand side first, as done here.
    """
    pattern = re.compile(r'"?\$\{' + re.escape(name) + r'\[[@*]\]\}"?')
    if pattern.search(body) is None:
        return None
    previous: list[tuple[str, int]] = list(old) if isinstance(old, list) else []
    parts: list[tuple[str, int]] = []
    pos = 0
    for match in pattern.finditer(body):
        segment = body[pos : match.start()]
        if segment.strip():
            parts.append((segment, line + body.count("\n", 0, pos)))
        parts.extend(previous)
        pos = match.end()
    if body[pos:].strip():
        parts.append((body[pos:], line + body.count("\n", 0, pos)))
    return parts


def _expand_markers(
    words: Sequence[Word], known: Mapping[str, str], lines: Mapping[str, Any], budget: _Budget, depth: int = 0
) -> list[Word]:
    """Replace ``\0NAME\0`` markers: a whole-word marker becomes the definition's words.

    ``\0~NAME\0`` (unquoted ``${A[@]}``) also splits each element at whitespace, as bash
    does. Markers inside the definition are expanded in turn (depth-limited: no cycles).
    """
    out: list[Word] = []
    for word in words:
        if "\0" not in word.text:
            out.append(word)
            continue
        parts = word.text.split("\0")
        if len(parts) == 3 and parts[0] == "" and parts[2] == "" and parts[1].lstrip("~") in known:
            split = parts[1].startswith("~")
            name = parts[1].lstrip("~")
            if depth >= 8:
                continue
            value = known[name]
            where = lines.get(name, word.line)
            base: list[Span] = []
            if isinstance(where, list):
                parts_with_lines = where
            else:
                stripped = value.startswith("(") and value.endswith(")")
                body = value[1:-1] if stripped else value
                parts_with_lines = [(body, where)]
                kept = budget.spans.get(name)
                if kept is not None and kept[0] == value:  # a string built piece by piece: each word its own
                    base = slice_spans(kept[1], int(stripped), int(stripped) + len(body), -int(stripped))
            inner: list[Word] = []
            for body, first_line in parts_with_lines:
                budget.spend(len(body) + _LEX_COST, name, word.line)  # re-lexing is work even for a short body
                lexer = _Lexer(body, first_line, budget, base)
                while True:
                    item = lexer.next_command(known)
                    if item is None:
                        break
                    inner.extend(item[0])
            origin = () if base else word.assumed + budget.origins.get(name, ())
            for element in _expand_markers(inner, known, lines, budget, depth + 1):
                budget.spend(len(element.text) + _WORD_COST, name, word.line)
                assumed = tuple(dict.fromkeys(element.assumed + origin))
                if split and element.quoted and any(ch.isspace() for ch in element.text):
                    out.extend(Word(piece, element.line, True, assumed) for piece in element.text.split())
                else:
                    out.append(Word(element.text, element.line, element.quoted, assumed, element.spans))
            continue
        pieces: list[str] = []
        spans: list[Span] = []
        at = 0  # where the part starts in word.text
        for idx, part in enumerate(parts):
            name = part.lstrip("~")
            start = sum(len(p) for p in pieces)
            if idx % 2 == 0 or name not in known:
                pieces.append(part)
                spans.extend(slice_spans(word.spans, at, at + len(part), start - at))
            elif isinstance(lines.get(name), list) and depth < 8:
                # "...${A[@]}..." inside a longer word: the elements, joined by spaces, each
                # keeping its own line and notes (a later `bash -c "$CMD"` reads them apart)
                marker = Word(f"\0{name}\0", word.line, word.quoted, ())
                elements = _expand_markers([marker], known, lines, budget, depth + 1)
                for element in elements:
                    offset = sum(len(p) for p in pieces)
                    spans.append(Span(offset, offset + len(element.text), element.line, element.assumed))
                    pieces.append(element.text + " ")
                if elements:
                    pieces[-1] = pieces[-1][:-1]
            else:
                pieces.append(known[name])
                spans.extend(slice_spans(word.spans, at, at + len(part) + 2, start - at))
            at += len(part) + (1 if idx < len(parts) - 1 else 0)
        text = "".join(pieces)
        budget.spend(len(text), parts[1].lstrip("~") if len(parts) > 1 else "", word.line)
        inherited = [
            note for idx, part in enumerate(parts) if idx % 2 for note in budget.origins.get(part.lstrip("~"), ())
        ]
        out.append(
            Word(text, word.line, word.quoted, tuple(dict.fromkeys(word.assumed + tuple(inherited))), tuple(spans))
        )
    return out


def _split_assignment(text: str, known: Mapping[str, str]) -> tuple[str, str]:
    match = _ASSIGN.match(text)
    assert match is not None
    name, append = match.group(1), match.group(2)
    value = text[match.end() :]
    if append:
        old = known.get(name, "")
        if old.startswith("(") and old.endswith(")") and value.startswith("("):
            value = old[:-1] + "\n" + value[1:]  # arr+=( ... ): one longer array
        else:
            value = old + value
    return name, value
