"""Split launch-script text into simple commands of shell words, the way bash would.

Quotes are removed, ``$VAR`` / ``${VAR:-default}`` / ``$(( ... ))`` are expanded from
assignments seen so far (unknown ones stay literal), heredoc bodies are skipped and
``#SBATCH`` lines are recorded. Nothing is executed; command substitution stays literal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from memtune.readers.launch.budget import _Budget
from memtune.readers.launch.script import Word

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_PLAIN = re.compile(r"[^\s'\"\\$`;&|()<>#]+")  # a run of characters with no shell meaning


_SEPARATORS = {";", "&&", "||", "|", "&", "|&", ";;", "(", ")", "{", "}"}


class _Lexer:
    """Produces one simple command (a list of Words) at a time, bash-style."""

    def __init__(self, text: str, first_line: int = 1, budget: _Budget | None = None) -> None:
        self.budget = budget or _Budget("")
        self.s = text
        self.n = len(text)
        self.i = 0
        self.line = first_line
        self.pending_heredocs: list[tuple[str, bool]] = []
        self.sbatch: dict[str, tuple[str, int]] = {}
        self.at_line_start = True
        self.unclosed: tuple[str, int] | None = None  # (quote, line it opened on): bash stops there
        self.word_assumed: list[str] = []  # assumptions behind the word being read (Word.assumed)

    def _skip_heredocs(self) -> None:
        """Called right after a newline: drop the bodies of heredocs opened on that line."""
        while self.pending_heredocs:
            delim, strip_tabs = self.pending_heredocs.pop(0)
            while self.i < self.n:
                end = self.s.find("\n", self.i)
                end = self.n if end < 0 else end
                body_line = self.s[self.i : end]
                self.i = min(end + 1, self.n)
                self.line += 1
                if (body_line.lstrip("\t") if strip_tabs else body_line) == delim:
                    break

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
        if start + 1 >= self.n:
            return "$", start + 1
        nxt = s[start + 1]
        if nxt == "{":
            end = self._read_braced(start + 1)
            inner = s[start + 2 : end - 1]
            array = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]$", inner)
            if array and array.group(1) in variables:
                # unquoted ${A[@]} also word-splits each element ("~" marks that)
                return f"\0{'~' if split else ''}{array.group(1)}\0", end
            # names, or positional parameters ($1 ...: the script is assumed to get no arguments)
            match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*|\d+)(?:(:?[-=])(.*))?$", inner, re.DOTALL)
            if match:
                name, op, default = match.groups()
                if name in variables and (variables[name] != "" or op is None or not op.startswith(":")):
                    self.word_assumed.extend(self.budget.origins.get(name, ()))
                    if split and _needs_split(variables[name]):
                        return f"\0{name}\0", end
                    self.budget.spend(len(variables[name]), name, self.line)
                    return variables[name], end
                if op is not None:
                    fallback = _strip_simple_quotes(default or "")
                    if name not in variables and not name.isdigit() and "$" not in fallback:
                        self.word_assumed.append(
                            f"{name} is not set in the script, so its default {fallback!r} (line {self.line}) "
                            "was used; the job's environment may set it"
                        )
                    return fallback, end
            return s[start:end], end
        if nxt == "(":
            end = self._read_parens(start + 1)
            if s.startswith("((", start + 1):
                value = _arithmetic(s[start + 3 : end - 2], variables)
                if value is not None:
                    return value, end
            return s[start:end], end
        match = _IDENT.match(s, start + 1)
        if match:
            name = match.group(0)
            if name in variables:
                self.word_assumed.extend(self.budget.origins.get(name, ()))
                if split and _needs_split(variables[name]):
                    return f"\0{name}\0", match.end()
                self.budget.spend(len(variables[name]), name, self.line)
                return variables[name], match.end()
            return s[start : match.end()], match.end()
        return "$" + nxt, start + 2

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
                words.append(Word("".join(buf), word_line, quoted, tuple(dict.fromkeys(self.word_assumed))))
            buf, in_word, quoted = [], False, False
            self.word_assumed = []

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
                buf.append(plain.group())
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
                    buf.append(s[self.i + 1])
                    in_word, quoted = True, True
                self.i += 2
                continue
            if ch == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    self.unclosed = self.unclosed or ("'", self.line)
                    end = n
                chunk = s[self.i + 1 : end]
                self.line += chunk.count("\n")
                buf.append(chunk)
                in_word, quoted = True, True
                self.i = end + 1
                continue
            if ch == "$" and self.i + 1 < n and s[self.i + 1] == "'":  # $'...' ANSI-C quoting
                end = self.i + 2
                while end < n and s[end] != "'":
                    end += 2 if s[end] == "\\" else 1
                chunk = s[self.i + 2 : min(end, n)]
                self.line += chunk.count("\n")
                buf.append(chunk.encode("utf-8", "backslashreplace").decode("unicode_escape", "replace"))
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
                            buf.append(s[self.i + 1])
                        self.i += 2
                        continue
                    if c == "$":
                        text, self.i = self._expand(self.i, variables)
                        buf.append(text)
                        continue
                    if c == "\n":
                        self.line += 1
                    buf.append(c)
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
                self.line += chunk.count("\n")
                buf.append(chunk)
                in_word = True
                self.i = end + 1
                continue
            if ch == "$":
                text, self.i = self._expand(self.i, variables, split=True)
                buf.append(text)
                in_word = True
                continue
            if ch in ";&|()":
                if ch == "(" and in_word and buf and buf[-1].endswith("="):  # arr=( ... )
                    end = self._read_parens(self.i)
                    buf.append(s[self.i : end])
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
                        self.pending_heredocs.append((match.group(2), strip_tabs))
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
            buf.append(ch)
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
