"""Split launch-script text into simple commands of shell words, the way bash would.

Quotes are removed, ``$VAR`` / ``${VAR:-default}`` / ``$(( ... ))`` are expanded from
assignments seen so far (unknown ones stay literal), heredoc bodies are set aside for the
caller and ``#SBATCH`` lines are recorded. Nothing is executed; command substitution stays
literal (and is recorded where bash would run it). Each word keeps Spans: where each
stretch of its text came from.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memtune.readers.launch.budget import _Budget
from memtune.readers.launch.script import Span, Word, span_notes

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_PLAIN = re.compile(r"[^\s'\"\\$`;&|()<>#]+")  # a run of characters with no shell meaning


_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")  # a variable a substitution reads


_OVERRIDE_KEY = re.compile(r"^[+~]{0,2}[A-Za-z_][\w.]*=")  # model.tensor_model_parallel_size=...


_SEPARATORS = {";", "&&", "||", "|", "&", "|&", ";;", "(", ")", "{", "}"}


@dataclass(frozen=True)
class Heredoc:
    """A heredoc body as read: the words of the command it feeds (so far), whether its
    delimiter was quoted (then bash expands nothing in it), and the line it starts on."""

    owner: tuple[Word, ...]
    body: str
    first_line: int
    quoted: bool


class _Lexer:
    """Produces one simple command (a list of Words) at a time, bash-style.

    ``spans`` (Span) say where each stretch of ``text`` came from when the text is itself a
    value built earlier (``bash -c "$CMD"``): words then take their line and notes from it.
    """

    def __init__(
        self, text: str, first_line: int = 1, budget: _Budget | None = None, spans: Sequence[Span] = ()
    ) -> None:
        self.budget = budget or _Budget("")
        self.s = text
        self.n = len(text)
        self.i = 0
        self.line = first_line
        self.pending_heredocs: list[tuple[str, bool, bool, list[Word]]] = []
        self.heredocs: list[Heredoc] = []  # bodies read so far (the caller takes them)
        self.base = sorted(spans, key=lambda span: span.start)
        self.base_starts = [span.start for span in self.base]
        self.spans: list[Span] = []  # spans of the word being read
        self.length = 0  # its length so far
        self.last_spans: list[Span] = []  # spans of the text _expand returned last
        self.sbatch: dict[str, tuple[str, int]] = {}
        self.at_line_start = True
        self.unclosed: tuple[str, int] | None = None  # (quote, line it opened on): bash stops there
        self.word_assumed: list[str] = []  # assumptions behind the word being read (Word.assumed)

    def _skip_heredocs(self) -> None:
        """Called right after a newline: read the bodies of heredocs opened on that line.

        They are kept (``self.heredocs``), not lexed: whether a body is the job itself
        (``sbatch <<EOF``) or data for another program (``cat > f <<EOF``) is the caller's call.
        """
        while self.pending_heredocs:
            delim, strip_tabs, quoted, owner = self.pending_heredocs.pop(0)
            first = self.line
            lines: list[str] = []
            while self.i < self.n:
                end = self.s.find("\n", self.i)
                end = self.n if end < 0 else end
                body_line = self.s[self.i : end]
                self.i = min(end + 1, self.n)
                self.line += 1
                if strip_tabs:
                    body_line = body_line.lstrip("\t")
                if body_line == delim:
                    break
                lines.append(body_line)
            self.heredocs.append(Heredoc(tuple(owner), "\n".join(lines) + "\n", first, quoted))

    def _line_at(self, pos: int) -> int:
        """The source line of text position ``pos`` (from the base spans when re-reading a value)."""
        if not self.base:
            return self.line
        idx = bisect.bisect_right(self.base_starts, pos) - 1
        return self.base[max(idx, 0)].line

    def _put(self, buf: list[str], text: str, src_start: int, src_end: int) -> None:
        """Append literal text read from ``s[src_start:src_end]`` to the word."""
        buf.append(text)
        if not text:
            return
        if self.base:
            line, notes = self._line_at(src_start), span_notes(self.base, src_start, src_end)
        else:
            line, notes = self.line, ()
        self._add_span(len(text), line, notes)

    def _put_expanded(self, buf: list[str], text: str) -> None:
        """Append what _expand returned, with the spans it left in ``last_spans``."""
        buf.append(text)
        base = self.length
        for span in self.last_spans:  # they may leave gaps (separators): keep each at its offset
            end = min(span.end, len(text))
            if span.start < end:
                self.length = base + span.start
                self._add_span(end - span.start, span.line, span.notes)
        self.length = base + len(text)

    def _add_span(self, size: int, line: int, notes: tuple[str, ...]) -> None:
        if size <= 0:
            return
        last = self.spans[-1] if self.spans else None
        if last is not None and last.end == self.length and last.line == line and last.notes == notes:
            self.spans[-1] = Span(last.start, self.length + size, line, notes)
        else:
            self.spans.append(Span(self.length, self.length + size, line, notes))
        self.length += size

    def _read_braced(self, start: int) -> int:
        """Index just after the ``}`` matching the ``${`` whose ``{`` is at ``start``."""
        return self._matching(start, "{", "}", quotes=False)

    def _read_parens(self, open_idx: int) -> int:
        """Index just after the ``)`` matching the ``(`` at ``open_idx`` (quotes respected)."""
        return self._matching(open_idx, "(", ")", quotes=True)

    def _matching(self, open_idx: int, opener: str, closer: str, quotes: bool) -> int:
        depth, j = 0, open_idx
        quote = ""
        while j < self.n:
            ch = self.s[j]
            if ch == "\n":
                self.line += 1
            if quote:
                if ch == "\\" and quote == '"':
                    j += 1
                elif ch == quote:
                    quote = ""
            elif quotes and ch in "'\"":
                quote = ch
            elif ch == opener:
                depth += 1
            elif ch == closer:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return self.n

    def _expand(self, start: int, variables: Mapping[str, str], split: bool = False) -> tuple[str, int]:
        """Expand the ``$...`` at ``start``; returns (text, next index).

        Values that bash would split into several words (arrays ``${A[@]}``, unquoted
        ``$VAR`` holding spaces) come back as a marker ``\0NAME\0`` that
        :func:`parse_text` replaces with the words of the definition, keeping the
        definition's line numbers (that is the line a user edits).
        """
        s = self.s
        line = self._line_at(start)
        self.last_spans = [Span(0, 1, line)]
        if start + 1 >= self.n:
            return "$", start + 1
        nxt = s[start + 1]
        if nxt == "{":
            end = self._read_braced(start + 1)
            inner = s[start + 2 : end - 1]
            array = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]$", inner)
            if array and array.group(1) in variables:
                # unquoted ${A[@]} also word-splits each element ("~" marks that)
                marker = f"\0{'~' if split else ''}{array.group(1)}\0"
                self.last_spans = [Span(0, len(marker), line, self.budget.origins.get(array.group(1), ()))]
                return marker, end
            # names, or positional parameters ($1 ...: the script is assumed to get no arguments)
            match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*|\d+)(?:(:?[-=])(.*))?$", inner, re.DOTALL)
            if match:
                name, op, default = match.groups()
                if name in variables and (variables[name] != "" or op is None or not op.startswith(":")):
                    return self._variable(name, variables, split, line), end
                if op is not None:
                    fallback = _strip_simple_quotes(default or "")
                    notes: tuple[str, ...] = ()
                    if name not in variables and not name.isdigit() and "$" not in fallback:
                        notes = (
                            f"{name} is not set in the script, so its default {fallback!r} (line {line}) "
                            "was used; the job's environment may set it",
                        )
                    self.last_spans = [Span(0, len(fallback), line, notes)]
                    return fallback, end
            self.last_spans = [Span(0, end - start, line)]
            return s[start:end], end
        if nxt == "(":
            end = self._read_parens(start + 1)
            if s.startswith("((", start + 1):
                value = _arithmetic(s[start + 3 : end - 2], variables)
                if value is not None:
                    self.last_spans = [Span(0, len(value), line)]
                    return value, end
            self._substitution(s[start:end], variables, line)
            self.last_spans = [Span(0, end - start, line)]
            return s[start:end], end
        match = _IDENT.match(s, start + 1)
        if match:
            name = match.group(0)
            if name in variables:
                return self._variable(name, variables, split, line), match.end()
            self.last_spans = [Span(0, match.end() - start, line)]
            return s[start : match.end()], match.end()
        self.last_spans = [Span(0, 2, line)]
        return "$" + nxt, start + 2

    def _substitution(self, text: str, variables: Mapping[str, str], line: int) -> None:
        """Remember a ``$(...)`` / backtick substitution where bash would run it (first sight).

        It is never run. What it may pass is guessed only from the variables it reads: the
        override keys and ``--flags`` in their values (``$(echo "$CLI_OVERRIDES" | tr ...)``),
        so those settings can be reported as known only when the job runs.
        """
        if text in self.budget.substitutions or len(self.budget.substitutions) > 1000:
            return
        keys: list[str] = []
        for name in dict.fromkeys(_REFERENCE.findall(text)):
            for token in variables.get(name, "").split():
                token = token.strip("'\"")
                if token.startswith("--") and len(token) > 2:
                    keys.append(token[2:].split("=", 1)[0])
                elif "=" in token and _OVERRIDE_KEY.match(token):
                    keys.append(token.lstrip("+~").split("=", 1)[0])
        self.budget.substitutions[text] = (line, tuple(dict.fromkeys(keys)))

    def _variable(self, name: str, variables: Mapping[str, str], split: bool, line: int) -> str:
        """A known variable's value (or the ``\0NAME\0`` marker when bash would split it).

        Its spans are the ones kept for that value, when the value was built by this reader,
        else one span with everything the value assumes.
        """
        value = variables[name]
        if split and _needs_split(value):
            self.last_spans = [Span(0, len(name) + 2, line, self.budget.origins.get(name, ()))]
            return f"\0{name}\0"
        self.budget.spend(len(value), name, self.line)
        kept = self.budget.spans.get(name)
        if kept is not None and kept[0] == value:
            self.last_spans = list(kept[1])
        else:
            self.last_spans = [Span(0, len(value), line, self.budget.origins.get(name, ()))]
        return value

    def next_command(self, variables: Mapping[str, str]) -> tuple[list[Word], str] | None:
        """The next simple command and the separator that ended it (``None`` at the end)."""
        words: list[Word] = []
        buf: list[str] = []
        word_line = self.line
        quoted = False
        in_word = False
        s, n = self.s, self.n

        def flush() -> None:
            nonlocal buf, in_word, quoted
            if in_word:
                text = "".join(buf)
                spans = tuple(self.spans)
                notes = tuple(dict.fromkeys([*self.word_assumed, *(n for span in spans for n in span.notes)]))
                line = spans[0].line if self.base and spans else word_line
                if text or quoted:  # an unquoted expansion to nothing is no word (bash drops it)
                    words.append(Word(text, line, quoted, notes, spans))
            buf, in_word, quoted = [], False, False
            self.word_assumed = []
            self.spans, self.length = [], 0

        while self.i < n:
            ch = s[self.i]
            if self.at_line_start:
                self.at_line_start = False
                stripped_end = s.find("\n", self.i)
                stripped_end = n if stripped_end < 0 else stripped_end
                text_line = s[self.i : stripped_end]
                if text_line.startswith("#SBATCH"):
                    self._record_sbatch(text_line)
            if ch == "\n":
                flush()
                self.i += 1
                self.line += 1
                self.at_line_start = True
                self._skip_heredocs()
                if words:
                    return words, "\n"
                word_line = self.line
                continue
            if ch in " \t\r":
                flush()
                self.i += 1
                continue
            if not in_word:
                word_line = self.line
            plain = _PLAIN.match(s, self.i)
            if plain:  # fast path: most of a script is ordinary word text
                self._put(buf, plain.group(), self.i, plain.end())
                in_word = True
                self.i = plain.end()
                continue
            if ch == "#" and not in_word:
                end = s.find("\n", self.i)
                self.i = n if end < 0 else end
                continue
            if ch == "\\":
                if self.i + 1 < n and s[self.i + 1] == "\n":
                    self.i += 2
                    self.line += 1
                    self.at_line_start = False
                    continue
                if self.i + 1 < n:
                    self._put(buf, s[self.i + 1], self.i, self.i + 2)
                    in_word, quoted = True, True
                self.i += 2
                continue
            if ch == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    self.unclosed = self.unclosed or ("'", self.line)
                    end = n
                chunk = s[self.i + 1 : end]
                self._put(buf, chunk, self.i + 1, end)
                self.line += chunk.count("\n")
                in_word, quoted = True, True
                self.i = end + 1
                continue
            if ch == "$" and self.i + 1 < n and s[self.i + 1] == "'":  # $'...' ANSI-C quoting
                end = self.i + 2
                while end < n and s[end] != "'":
                    end += 2 if s[end] == "\\" else 1
                chunk = s[self.i + 2 : min(end, n)]
                decoded = chunk.encode("utf-8", "backslashreplace").decode("unicode_escape", "replace")
                self._put(buf, decoded, self.i + 2, min(end, n))
                self.line += chunk.count("\n")
                in_word, quoted = True, True
                self.i = end + 1
                continue
            if ch == '"':
                opened_on = self.line
                self.i += 1
                in_word, quoted = True, True
                while self.i < n and s[self.i] != '"':
                    c = s[self.i]
                    if c == "\\" and self.i + 1 < n and s[self.i + 1] in '"\\$`\n':
                        if s[self.i + 1] == "\n":
                            self.line += 1
                        else:
                            self._put(buf, s[self.i + 1], self.i, self.i + 2)
                        self.i += 2
                        continue
                    if c == "$":
                        text, self.i = self._expand(self.i, variables)
                        self._put_expanded(buf, text)
                        continue
                    self._put(buf, c, self.i, self.i + 1)
                    if c == "\n":
                        self.line += 1
                    self.i += 1
                if self.i >= n:
                    self.unclosed = self.unclosed or ('"', opened_on)
                self.i += 1
                continue
            if ch == "`":
                end = s.find("`", self.i + 1)
                if end < 0:
                    self.unclosed = self.unclosed or ("`", self.line)
                    end = n
                chunk = s[self.i : end + 1]
                self._substitution(chunk, variables, self._line_at(self.i))
                self._put(buf, chunk, self.i, end + 1)
                self.line += chunk.count("\n")
                in_word = True
                self.i = end + 1
                continue
            if ch == "$":
                text, self.i = self._expand(self.i, variables, split=True)
                self._put_expanded(buf, text)
                in_word = True
                continue
            if ch in ";&|()":
                if ch == "(" and in_word and buf and buf[-1].endswith("="):  # arr=( ... )
                    end = self._read_parens(self.i)
                    self._put(buf, s[self.i : end], self.i, end)
                    self.i = end
                    continue
                flush()
                op = s[self.i : self.i + 2]
                if op in ("&&", "||", ";;", "|&"):
                    self.i += 2
                else:
                    op = ch
                    self.i += 1
                if op == "&" and self.i < n and s[self.i] == ">":  # &> redirection
                    self.i += 1
                    self._skip_redirect_target()
                    continue
                if words or op in ("(", ")", ";;"):  # a lone ";;" still ends a case clause
                    return words, op
                continue
            if ch in "<>":
                # redirection: drop operator and target; a heredoc's delimiter is remembered
                if s.startswith("<<<", self.i):
                    flush()
                    self.i += 3
                    if any(w.text == "read" and not w.quoted for w in words):
                        # `read A B <<< "$X"`: the here-string is the data read assigns from
                        words.append(Word("<<<", self.line, False))
                        continue
                    self._skip_redirect_target()
                    continue
                if s.startswith("<<", self.i):
                    flush()
                    self.i += 2
                    strip_tabs = self.i < n and s[self.i] == "-"
                    if strip_tabs:
                        self.i += 1
                    while self.i < n and s[self.i] in " \t":
                        self.i += 1
                    match = re.match(r"""(['"]?)([^\s'";&|<>]+)\1""", s[self.i :])
                    if match:
                        delim = match.group(2)
                        quoted_delim = bool(match.group(1)) or "\\" in delim
                        self.pending_heredocs.append((delim.replace("\\", ""), strip_tabs, quoted_delim, words))
                        self.i += match.end()
                    continue
                if in_word and all(c.isdigit() for c in buf) and not quoted:  # 2>file
                    buf, in_word = [], False
                flush()
                self.i += 1
                while self.i < n and s[self.i] in ">&|":
                    self.i += 1
                self._skip_redirect_target()
                continue
            self._put(buf, ch, self.i, self.i + 1)
            in_word = True
            self.i += 1
        flush()
        if words:
            return words, ""
        return None

    def _skip_redirect_target(self) -> None:
        s, n = self.s, self.n
        while self.i < n and s[self.i] in " \t":
            self.i += 1
        quote = ""
        while self.i < n:
            ch = s[self.i]
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch in " \t\n;&|()":
                break
            self.i += 1

    def _record_sbatch(self, text_line: str) -> None:
        body = text_line[len("#SBATCH") :].split("#", 1)[0].strip()
        for part in body.split():
            if part.startswith("-"):
                key, _, value = part.lstrip("-").partition("=")
                self.sbatch[key] = (value, self.line)


def _needs_split(value: str) -> bool:
    return any(ch in value for ch in " \t\n") or value.startswith("(")


def _strip_simple_quotes(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


_ARITH_NAME = re.compile(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def _arithmetic(expr: str, variables: Mapping[str, str]) -> str | None:
    """``$(( ... ))`` with integers, + - * / % and known variables; None when unsure."""
    import ast

    def substitute(match: re.Match[str]) -> str:
        value = variables.get(match.group(1), "")
        return value if re.fullmatch(r"-?\d+", value.strip()) else "x"

    text = _ARITH_NAME.sub(substitute, expr)
    if not re.fullmatch(r"[\d\s+\-*/%()]*", text) or not text.strip() or len(text) > 200:
        return None
    try:
        tree = ast.parse(text.strip().replace("/", "//"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    allowed = (
        ast.Expression,
        ast.BinOp,
        ast.UnaryOp,
        ast.Constant,
        ast.Add,
        ast.Sub,
        ast.Mult,
        ast.FloorDiv,
        ast.Mod,
        ast.USub,
        ast.UAdd,
    )
    if not all(isinstance(node, allowed) for node in ast.walk(tree)):
        return None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp):
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                if abs(a) > 1 << 62 or abs(b) > 1 << 62:
                    raise ValueError("too large")
                return a * b
            if b == 0:
                raise ZeroDivisionError
            quotient = abs(a) // abs(b)  # bash truncates toward zero
            if isinstance(node.op, ast.FloorDiv):
                return quotient if (a >= 0) == (b >= 0) else -quotient
            return a - b * (quotient if (a >= 0) == (b >= 0) else -quotient)
        raise ValueError("unsupported")

    try:
        return str(value(tree))
    except (ValueError, ZeroDivisionError, RecursionError):
        return None
