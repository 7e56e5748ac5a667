"""if / elif / else / fi and case / esac as bash decides them, without running anything.

The shell reader (:mod:`memtune.readers.launch.commands`) hands every command to
:class:`_Branches` first: a branch whose condition is known false is skipped, an unknown one
keeps every branch and marks what it sets as a guess (``BRANCH_GUESS``), and a variable every
branch sets alike is no guess. :func:`_note_origin` remembers what each value assumes so every
word built from it can say so.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

from memtune.readers.launch.budget import _Budget
from memtune.readers.launch.script import BRANCH_GUESS, Span, Word, slice_spans


class _Branches:
    """if / elif / else / fi and case / esac, with conditions evaluated when every operand is known.

    A branch whose condition is known false is skipped; an unknown condition keeps every
    branch (the conservative reading: settings from all of them are seen). A ``case`` on a
    known word takes the first clause whose pattern matches, as bash does (Megatron-LM's
    Mamba example picks its model size this way; reading every clause would take the last).
    A condition may be a list (``[ a ] && [ b ] || [[ c ]]``): its parts arrive as separate
    commands and are gathered until the list ends. Each branch that may run remembers the
    variables it sets, so a variable every branch sets to the same value is no guess.
    """

    def __init__(self) -> None:
        # [this branch: True/False/None, some branch taken: True/False/None] for `if`;
        # a `case` frame adds [subject or None when unknown, "patterns" | "body", patterns so far]
        self.frames: list[list[Any]] = []
        # per frame: what each branch that may run sets (None for a branch that cannot run),
        # and whether the branches cover every case (an `else`, a `*)` clause)
        self.sets: list[list[dict[str, tuple[str, tuple[str, ...]]] | None]] = []
        self.exhaustive: list[bool] = []
        self.clause_ends = False  # the command just read ended a case clause (`;;`)
        self.pending: tuple[str, list[tuple[Sequence[Word], str]]] | None = None  # condition list being read
        self.settled: dict[str, tuple[str, tuple[str, ...]]] = {}  # set alike in every branch (read by the caller)

    @property
    def active(self) -> bool:
        return all(frame[0] is not False for frame in self.frames)

    @property
    def uncertain(self) -> bool:
        """Inside a branch that may or may not run (its condition is unknown)?"""
        return any(frame[0] is None for frame in self.frames)

    def record(self, name: str, value: str, notes: tuple[str, ...]) -> None:
        """An assignment in the current branch (``notes``: what the value assumes, no branch guess)."""
        if self.sets and self.sets[-1] and self.sets[-1][-1] is not None:
            branch = self.sets[-1][-1]
            assert branch is not None
            branch[name] = (value, notes)

    def _begin_branch(self, state: bool | None) -> None:
        self.sets[-1].append(None if state is False else {})

    def _push(self, frame: list[Any]) -> None:
        self.frames.append(frame)
        self.sets.append([])
        self.exhaustive.append(False)

    def _pop(self) -> None:
        """Close the innermost if/case: what every branch that may run sets alike stands.

        Such a variable is set in the enclosing branch as surely as if the if/case were not
        there; at the top level the caller drops the branch guess from it.
        """
        self.frames.pop()
        branches = self.sets.pop()
        exhaustive = self.exhaustive.pop()
        runnable = [b for b in branches if b is not None]
        if not runnable or not exhaustive:
            return
        first, rest = runnable[0], runnable[1:]
        same = {name: got for name, got in first.items() if all(b.get(name, (None,))[0] == got[0] for b in rest)}
        if not same:
            return
        if self.sets:
            parent = self.sets[-1][-1] if self.sets[-1] else None
            if parent is not None:
                parent.update(same)
        else:
            self.settled.update(same)

    def step(self, words: list[Word], sep: str) -> list[Word]:
        """Consume leading if/elif/else/fi and case words; return what is left to run."""
        if self.pending is not None:
            head, parts = self.pending
            parts.append((words, sep))
            if sep in ("&&", "||"):
                return []
            self.pending = None
            self._condition_ends(head, _condition(parts))
            return []
        if self.clause_ends:
            self.clause_ends = False
            if self.frames and len(self.frames[-1]) > 2:
                self.frames[-1][0], self.frames[-1][3], self.frames[-1][4] = False, "patterns", []
        if self.frames and len(self.frames[-1]) > 2:
            words = self._case_step(words, sep)
            if not words:
                return []
        if words and not words[0].quoted and words[0].text == "case" and len(words) >= 3:
            subject = words[1].text
            known = not any(mark in subject for mark in ("$", "`", "\0"))
            self._push([False, False, subject if known else None, "patterns", []])
            rest = words[3:] if words[2].text == "in" else []
            return self._case_step(rest, sep) if rest else []
        while words and not words[0].quoted and words[0].text in ("if", "elif", "else", "fi", "then"):
            head = words[0].text
            if head == "then":
                words = words[1:]
                continue
            if head in ("if", "elif"):
                if head == "elif" and not self.frames:
                    return []
                if sep in ("&&", "||"):
                    self.pending = (head, [(words[1:], sep)])
                    return []
                self._condition_ends(head, _condition([(words[1:], sep)]))
                return []
            if head == "fi":
                if self.frames:
                    self._pop()
                words = words[1:]
                continue
            if not self.frames:
                words = words[1:]
                continue
            frame = self.frames[-1]
            taken = frame[1]
            # else
            frame[0] = False if taken is True else (True if taken is False else None)
            frame[1] = True if frame[0] is True else taken
            self._begin_branch(frame[0])
            self.exhaustive[-1] = True
            words = words[1:]
        return words

    def _condition_ends(self, head: str, cond: bool | None) -> None:
        """The condition of an ``if`` / ``elif`` is read: open the branch it guards."""
        if head == "if":
            cond = cond if self.active else False
            self._push([cond, cond])
            self._begin_branch(cond)
            return
        frame = self.frames[-1]
        taken = frame[1]
        branch = False if taken is True else (cond if taken is False else (None if cond is not False else False))
        frame[0] = branch
        frame[1] = True if branch is True else (None if branch is None or taken is None else taken)
        self._begin_branch(branch)

    def _case_step(self, words: list[Word], sep: str) -> list[Word]:
        """Inside a case: collect ``pat | pat )`` patterns, open the clause, or close at ``esac``."""
        frame = self.frames[-1]
        if frame[3] == "body":
            if words and not words[0].quoted and words[0].text == "esac":
                self._pop()
                return words[1:]
            if sep == ";;":
                self.clause_ends = True
            return words
        if words and not words[0].quoted and words[0].text == "esac":
            self._pop()
            return words[1:]
        frame[4].extend(w.text for w in words if w.text != "(")
        if sep != ")":
            return []  # `a | b )`: more patterns follow
        patterns, frame[4] = frame[4], []
        subject, taken = frame[2], frame[1]
        if taken is True:
            branch: bool | None = False
        elif subject is None or any("$" in p or "`" in p for p in patterns):
            branch = None
        else:
            branch = any(fnmatch.fnmatchcase(subject, p) for p in patterns)
        if branch is False and taken is None:
            branch = False
        frame[0], frame[3] = branch, "body"
        frame[1] = True if branch is True else (None if branch is None or taken is None else taken)
        self._begin_branch(branch)
        if "*" in patterns:
            self.exhaustive[-1] = True
        return []


def _note_origin(budget: _Budget, branches: _Branches, name: str, word: Word, value: str) -> None:
    """Remember what the new value of ``name`` assumes, so every word made from it says so.

    A value built from an unset variable's default, or set in a branch whose condition is
    only known at run time (the reader keeps the last such value), is a guess the helpers
    must show next to the setting it feeds, never use silently.
    """
    notes = list(word.assumed)
    appended = "+=" in word.text.split("=", 1)[0] + "="
    previous_spans = budget.spans.get(name)
    previous_notes = budget.origins.get(name, ())
    if appended:
        notes = list(budget.origins.get(name, ())) + notes
    branches.record(name, value, tuple(dict.fromkeys(notes)))
    guess: tuple[str, ...] = ()
    if branches.uncertain:
        guess = (f"{name} is set on line {word.line} {BRANCH_GUESS}; the last value the script sets was used",)
        notes.extend(guess)
    if notes:
        budget.origins[name] = tuple(dict.fromkeys(notes))
    else:
        budget.origins.pop(name, None)
    budget.spans.pop(name, None)
    if value.startswith("("):
        return  # arrays keep each part's own line (expansion._remember) and are read when used
    own_start = word.text.index("=") + 1
    own_len = len(word.text) - own_start
    own = slice_spans(word.spans, own_start, len(word.text), len(value) - own_len - own_start)
    before: list[Span] = []
    if appended and len(value) > own_len:
        old_len = len(value) - own_len
        before = [Span(0, old_len, word.line, previous_notes)]
        kept = previous_spans
        if kept is not None and kept[0] == value[:old_len]:
            before = list(kept[1])
    spans = [Span(sp.start, sp.end, sp.line, tuple(dict.fromkeys(sp.notes + guess))) for sp in before + own]
    budget.spans[name] = (value, tuple(spans))


def _settle(budget: _Budget, branches: _Branches) -> None:
    """Variables every branch of an undecided if/case set to the same value are no guess."""
    for name, (_, notes) in branches.settled.items():
        if notes:
            budget.origins[name] = notes
        else:
            budget.origins.pop(name, None)
        kept = budget.spans.get(name)
        if kept is not None:
            own = f"{name} is set on line "
            spans = tuple(
                Span(
                    sp.start,
                    sp.end,
                    sp.line,
                    tuple(n for n in sp.notes if not (n.startswith(own) and BRANCH_GUESS in n)),
                )
                for sp in kept[1]
            )
            budget.spans[name] = (kept[0], spans)
    branches.settled.clear()


def _condition(parts: Sequence[tuple[Sequence[Word], str]]) -> bool | None:
    """An if/elif condition list (``[ a ] && [[ b || c ]] || test d``) when every operand is known.

    Parts joined by ``&&`` / ``||`` (the lexer splits there, even inside ``[[ ]]``) are
    evaluated left to right with bash's precedence; an unknown part makes the result unknown
    unless the other side decides it (``false && x`` is false whatever x is).
    """
    tokens: list[tuple[str, bool]] = []
    for words, sep in parts:
        # a word made from a value picked between undecided branches is as unknown as `$X`
        tokens.extend(("$?" if any(BRANCH_GUESS in n for n in w.assumed) else w.text, False) for w in words)
        if sep in ("&&", "||"):
            tokens.append((sep, True))
    reader = _ConditionReader(tokens)
    try:
        result = reader.command_list()
    except _Unreadable:
        return None
    return result if reader.at_end() else None


class _Unreadable(Exception):
    """A condition the reader does not understand (it is then unknown, never guessed)."""


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return True if a is True and b is True else None


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return False if a is False and b is False else None


class _ConditionReader:
    """Recursive descent over a condition's words; ``(text, True)`` tokens are ``&&`` / ``||``."""

    def __init__(self, tokens: Sequence[tuple[str, bool]]) -> None:
        self.tokens = list(tokens)
        self.i = 0

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def _peek(self) -> tuple[str, bool] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def command_list(self) -> bool | None:
        """``cmd (&&|| cmd)*``: in a shell list both operators bind alike, left to right."""
        result = self._command()
        while (token := self._peek()) is not None and token[1]:
            self.i += 1
            right = self._command()
            result = _and(result, right) if token[0] == "&&" else _or(result, right)
        return result

    def _command(self) -> bool | None:
        token = self._peek()
        if token is None or token[1]:
            raise _Unreadable
        if token[0] == "!":
            self.i += 1
            inner = self._command()
            return None if inner is None else not inner
        if token[0] == "[[":
            self.i += 1
            result = self._double_or()
            if self._peek() != ("]]", False):
                raise _Unreadable
            self.i += 1
            return result
        if token[0] in ("[", "test"):
            closer = "]" if token[0] == "[" else None
            self.i += 1
            words = self._words_until(closer)
            if closer is not None:
                if self._peek() != ("]", False):
                    raise _Unreadable
                self.i += 1
            return _primary(words)
        self._words_until(None)  # some other command (grep -q ...): its status is unknown
        return None

    def _words_until(self, closer: str | None) -> list[str]:
        words: list[str] = []
        while (token := self._peek()) is not None and not token[1] and token[0] != closer:
            words.append(token[0])
            self.i += 1
        return words

    def _double_or(self) -> bool | None:
        """Inside ``[[ ]]``: ``&&`` binds tighter than ``||``."""
        result = self._double_and()
        while self._peek() == ("||", True):
            self.i += 1
            result = _or(result, self._double_and())
        return result

    def _double_and(self) -> bool | None:
        result = self._double_not()
        while self._peek() == ("&&", True):
            self.i += 1
            result = _and(result, self._double_not())
        return result

    def _double_not(self) -> bool | None:
        if self._peek() == ("!", False):
            self.i += 1
            inner = self._double_not()
            return None if inner is None else not inner
        words: list[str] = []
        while (token := self._peek()) is not None and not token[1] and token[0] != "]]":
            words.append(token[0])
            self.i += 1
        return _primary(words)


_NUMERIC = {"-eq", "-ne", "-lt", "-gt", "-le", "-ge"}


def _primary(inner: Sequence[str]) -> bool | None:
    """One test (``a == b``, ``-z a``, ``a -lt b``, a lone word) when its operands are known."""
    if inner[:1] == ["!"]:
        rest = _primary(inner[1:])
        return None if rest is None else not rest
    if any("$" in t or "`" in t or "\0" in t for t in inner):
        return None
    if len(inner) == 0:
        return False
    if len(inner) == 1:
        return inner[0] != ""  # `[ word ]`: true when the word is not empty
    if len(inner) == 2 and inner[0] in ("-z", "-n"):
        return (inner[1] == "") == (inner[0] == "-z")
    if len(inner) == 3 and inner[1] in ("==", "=", "!="):
        if any(ch in inner[2] for ch in "*?[") and inner[1] != "=":
            return None  # glob pattern
        return (inner[0] == inner[2]) != (inner[1] == "!=")
    if len(inner) == 3 and inner[1] in _NUMERIC:
        try:
            a, b = int(inner[0]), int(inner[2])
        except ValueError:
            return None
        return {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-gt": a > b, "-le": a <= b, "-ge": a >= b}[inner[1]]
    return None
