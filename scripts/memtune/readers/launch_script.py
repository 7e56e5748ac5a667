"""Read a bash / sbatch launch script the way bash would, without running it.

What we need from a launch script is small but must be exact about *where* each thing
comes from (a finding has to point at the line to change): the environment the training
process will see (``export`` lines, ``VAR=... cmd`` prefixes, ``env VAR=...``), and the
training command itself (behind ``srun`` / ``torchrun`` / ``python -m
torch.distributed.run`` / ``python`` / ``bash -c "..."``) with its Megatron-LM flags and
Megatron Bridge Hydra overrides. Every value keeps the line it came from.

Deliberately not a full shell: no execution, no globbing, command substitution is kept
as literal text. ``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` are expanded from assignments
seen earlier in the script (so ``--tensor-model-parallel-size $TP`` resolves), unknown
variables stay literal. Heredoc bodies are skipped. Linear time in the script length,
and the text that expansion may produce is bounded (``A=$A$A`` doubles per line, an array
appended to itself grows geometrically): past the bound the script is refused with an
"expansion too large" error instead of exhausting memory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memtune.errors import InputError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN = re.compile(r"[^\s'\"\\$`;&|()<>#]+")  # a run of characters with no shell meaning
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_PY = re.compile(r"^(?:.*/)?(?:python(?:\d+(?:\.\d+)*)?|pypy3?)$")
_SEPARATORS = {";", "&&", "||", "|", "&", "|&", ";;", "(", ")", "{", "}"}
_KEYWORDS_DROP = {"then", "do", "while", "until", "!", "time", "exec", "nohup", "command", "builtin"}
_KEYWORDS_END = {"done", "esac", "}", "{"}
# Wrappers whose own options come before the real program.
_WRAPPERS = {
    "srun",
    "mpirun",
    "mpiexec",
    "salloc",
    "numactl",
    "taskset",
    "nsys",
    "ncu",
    "uv",
    "poetry",
    "pdm",
    "conda",
    "micromamba",
    "apptainer",
    "singularity",
    "enroot",
    "docker",
    "timeout",
    "stdbuf",
    "env",
    "xargs",
    "bash",
    "sh",
    "accelerate",
    "deepspeed",
    "ddp",
    "nemo",
    "sudo",
    "exec",
}
_TORCHRUN_MODULES = {"torch.distributed.run", "torch.distributed.launch"}
# All the text variable and array expansion may produce for one script, together. A real
# launch script expands a few kilobytes; bash itself would need gigabytes past this.
MAX_EXPANSION_CHARS = 8 << 20
_LEX_COST = 256  # what re-lexing an array's definition costs beyond its length, in the same units
_WORD_COST = 16  # what handing one expanded word up one level costs


class ExpansionTooLarge(InputError):
    """The script's variable expansion outgrew MAX_EXPANSION_CHARS (one line, exit 2)."""


class _Budget:
    """The expansion output one script may still produce, shared by every nested lexer."""

    __slots__ = ("left", "path")

    def __init__(self, path: str) -> None:
        self.left = MAX_EXPANSION_CHARS
        self.path = path

    def spend(self, amount: int, name: str, line: int) -> None:
        self.left -= amount
        if self.left < 0:
            raise ExpansionTooLarge(
                f"{self.path or 'script'}:{line}: expansion too large: expanding ${name} takes the script past "
                f"{MAX_EXPANSION_CHARS >> 20} MiB of expanded text (a variable that repeats itself, like A=$A$A, "
                "or an array appended to itself); simplify the script"
            )


# Bridge performance-script shortcuts -> ConfigContainer paths (scripts/performance/argument_parser.py).
BRIDGE_SHORTCUTS: Mapping[str, str] = {
    "-tp": "model.tensor_model_parallel_size",
    "--tensor_model_parallel_size": "model.tensor_model_parallel_size",
    "-pp": "model.pipeline_model_parallel_size",
    "--pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
    "-vp": "model.virtual_pipeline_model_parallel_size",
    "--virtual_pipeline_model_parallel_size": "model.virtual_pipeline_model_parallel_size",
    "-cp": "model.context_parallel_size",
    "--context_parallel_size": "model.context_parallel_size",
    "-ep": "model.expert_model_parallel_size",
    "--expert_model_parallel_size": "model.expert_model_parallel_size",
    "-etp": "model.expert_tensor_parallel_size",
    "--expert_tensor_parallel_size": "model.expert_tensor_parallel_size",
    "-mb": "train.micro_batch_size",
    "--micro_batch_size": "train.micro_batch_size",
    "-gb": "train.global_batch_size",
    "--global_batch_size": "train.global_batch_size",
}


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal; ``quoted`` when any part of it was quoted."""

    text: str
    line: int
    quoted: bool = False


@dataclass(frozen=True)
class EnvSetting:
    """An environment variable the script sets (or unsets), where, and how."""

    name: str
    value: str | None  # None: unset
    line: int
    how: str  # "export" | "prefix" | "shell" (not exported) | "unset"
    command_line: int | None = None  # for "prefix": the command it applies to
    file: str = ""

    @property
    def exported(self) -> bool:
        return self.how in ("export", "prefix")

    @property
    def source(self) -> str:
        return f"{self.file}:{self.line}" if self.file else f"line {self.line}"


@dataclass(frozen=True)
class Flag:
    """A ``--flag`` of the training program with its values (``()`` for a bare switch)."""

    name: str  # without the leading dashes, as written (e.g. "use-nccl-ub")
    values: tuple[str, ...]
    line: int

    @property
    def value(self) -> str | None:
        return " ".join(self.values) if self.values else None


@dataclass(frozen=True)
class Override:
    """A Hydra-style override ``[+|++|~]key[=value]`` (or a Bridge shortcut like ``-tp 4``)."""

    key: str
    value: str | None
    line: int
    prefix: str = ""  # "", "+", "++", "~"
    text: str = ""  # as written


@dataclass(frozen=True)
class Command:
    words: tuple[Word, ...]
    env_prefix: tuple[EnvSetting, ...] = ()
    launcher: tuple[str, ...] = ()  # e.g. ("srun", "torchrun")
    program: str | None = None  # script path or "-m module"
    program_args: tuple[Word, ...] = ()
    launcher_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def line(self) -> int:
        return self.words[0].line if self.words else 0

    @property
    def is_python(self) -> bool:
        return self.program is not None


@dataclass(frozen=True)
class LaunchScript:
    path: str
    env: tuple[EnvSetting, ...]
    commands: tuple[Command, ...]
    sbatch: Mapping[str, tuple[str, int]]
    notes: tuple[str, ...] = ()
    unclosed_quote: tuple[str, int] | None = None  # (quote, line): the rest of the file was read as one word
    crlf_line: int | None = None  # first line ending in CR LF: bash keeps the CR in every word there

    @property
    def python_commands(self) -> tuple[Command, ...]:
        return tuple(c for c in self.commands if c.is_python)

    def training_command(self) -> Command | None:
        """The command that most looks like the training run (most flags/overrides)."""
        best, score = None, -1
        for cmd in self.python_commands:
            value = len(cmd.program_args) + (100 if cmd.launcher else 0)
            if value > score:
                best, score = cmd, value
        return best

    def env_for(self, command: Command | None) -> dict[str, EnvSetting]:
        """Exported variables in effect when ``command`` starts (its own prefixes win)."""
        limit = command.line if command is not None else 1 << 62
        state: dict[str, EnvSetting] = {}
        shell: dict[str, EnvSetting] = {}
        for setting in self.env:
            if setting.how == "prefix":
                continue
            if setting.line > limit:
                break
            if setting.how == "unset":
                state.pop(setting.name, None)
                shell.pop(setting.name, None)
            elif setting.how == "shell":
                if setting.name in state:  # assigning an exported variable keeps it exported
                    state[setting.name] = EnvSetting(
                        setting.name, setting.value, setting.line, "export", file=setting.file
                    )
                else:
                    shell[setting.name] = setting
            else:
                if setting.value is None and setting.name in shell:  # `export NAME` after NAME=...
                    prior = shell[setting.name]
                    setting = EnvSetting(setting.name, prior.value, prior.line, "export", file=setting.file)
                if setting.value is not None:
                    state[setting.name] = setting
        if command is not None:
            for prefix in command.env_prefix:
                state[prefix.name] = prefix
        return state

    def later_settings(self, command: Command, name: str) -> list[EnvSetting]:
        """Assignments of ``name`` that come after ``command`` (too late to affect it)."""
        return [s for s in self.env if s.name == name and s.how != "prefix" and s.line > command.line]


# ------------------------------------------------------------------------------ lexer


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
                    if split and _needs_split(variables[name]):
                        return f"\0{name}\0", end
                    self.budget.spend(len(variables[name]), name, self.line)
                    return variables[name], end
                if op is not None:
                    return _strip_simple_quotes(default or ""), end
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
                words.append(Word("".join(buf), word_line, quoted))
            buf, in_word, quoted = [], False, False

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
                if words or op in ("(", ")"):
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


# ------------------------------------------------------------------------- commands


def _split_launcher(words: Sequence[Word]) -> tuple[tuple[str, ...], str | None, tuple[Word, ...], dict[str, str]]:
    """Find the python program behind srun/torchrun/... ; (launchers, program, args, options)."""
    launchers: list[str] = []
    options: dict[str, str] = {}
    i = 0
    n = len(words)
    while i < n:
        word = words[i].text
        base = os.path.basename(word)
        if base in ("torchrun",):
            launchers.append("torchrun")
            i += 1
            i = _skip_torchrun_options(words, i, options)
            if i < n and words[i].text == "-m" and i + 1 < n:
                return tuple(launchers), "-m " + words[i + 1].text, tuple(words[i + 2 :]), options
            if i < n:
                return tuple(launchers), words[i].text, tuple(words[i + 1 :]), options
            return tuple(launchers), None, (), options
        if _PY.match(base):
            j = i + 1
            while j < n and words[j].text.startswith("-") and words[j].text != "-m":
                if words[j].text in ("-X", "-W"):
                    j += 1
                j += 1
            if j < n and words[j].text == "-m" and j + 1 < n:
                module = words[j + 1].text
                if module in _TORCHRUN_MODULES:
                    launchers.append("python -m " + module)
                    k = _skip_torchrun_options(words, j + 2, options)
                    if k < n and words[k].text == "-m" and k + 1 < n:
                        return tuple(launchers), "-m " + words[k + 1].text, tuple(words[k + 2 :]), options
                    if k < n:
                        return tuple(launchers), words[k].text, tuple(words[k + 1 :]), options
                    return tuple(launchers), None, (), options
                return tuple(launchers), "-m " + module, tuple(words[j + 2 :]), options
            if j < n and words[j].text == "-c":
                return tuple(launchers), None, (), options
            if j < n:
                return tuple(launchers), words[j].text, tuple(words[j + 1 :]), options
            return tuple(launchers), None, (), options
        if base in ("srun", "mpirun", "mpiexec"):
            launchers.append(base)
            i += 1
            while i < n and words[i].text.startswith("-"):
                key, eq, value = words[i].text.lstrip("-").partition("=")
                if eq:
                    options[f"{base}.{key}"] = value
                elif i + 1 < n and not words[i + 1].text.startswith("-") and not _looks_like_program(words[i + 1].text):
                    options[f"{base}.{key}"] = words[i + 1].text
                    i += 1
                i += 1
            continue
        i += 1
    return tuple(launchers), None, (), options


def _looks_like_program(text: str) -> bool:
    base = os.path.basename(text)
    return (
        bool(_PY.match(base))
        or base in ("torchrun", "bash", "sh", "uv", "nsys", "numactl", "env")
        or text.endswith((".py", ".sh"))
    )


def _skip_torchrun_options(words: Sequence[Word], i: int, options: dict[str, str]) -> int:
    n = len(words)
    valueless = {"standalone", "no-python", "no_python", "module", "run-path", "run_path", "tee", "r"}
    while i < n and words[i].text.startswith("-") and words[i].text != "-m":
        key, eq, value = words[i].text.lstrip("-").partition("=")
        if eq:
            options[f"torchrun.{key.replace('-', '_')}"] = value
        elif key not in valueless and i + 1 < n and not words[i + 1].text.startswith("-"):
            if words[i + 1].text.endswith(".py"):
                pass
            else:
                options[f"torchrun.{key.replace('-', '_')}"] = words[i + 1].text
                i += 1
        i += 1
    return i


def parse_text(
    text: str,
    path: str = "",
    first_line: int = 1,
    variables: Mapping[str, str] | None = None,
    variable_lines: Mapping[str, int] | None = None,
    budget: _Budget | None = None,
) -> LaunchScript:
    """Parse launch-script ``text``; ``path`` is used in sources (``file:line``).

    Raises ExpansionTooLarge when expanding variables would outgrow MAX_EXPANSION_CHARS.
    """
    budget = budget or _Budget(path)
    env: list[EnvSetting] = []
    commands: list[Command] = []
    notes: list[str] = []
    known: dict[str, str] = dict(variables or {})
    known_lines: dict[str, Any] = dict(variable_lines or {})  # name -> line, or [(array part, line), ...]
    branches = _Branches()
    lexer = _Lexer(text, first_line, budget)
    auto_export = False
    sbatch: dict[str, tuple[str, int]] = {}
    while True:
        item = lexer.next_command(known)
        if item is None:
            break
        words, sep = item
        if any("\0" in w.text for w in words):
            words = _expand_markers(words, known, known_lines, budget)
        words = branches.step(words, sep)
        if not branches.active:
            continue
        while words and words[0].text in _KEYWORDS_DROP and not words[0].quoted:
            words = words[1:]
        if not words or (words[0].text in _KEYWORDS_END and not words[0].quoted):
            continue
        # leading NAME=value words
        prefixes: list[Word] = []
        while words and _ASSIGN.match(words[0].text) and not words[0].text.startswith(("'", '"')):
            prefixes.append(words[0])
            words = words[1:]
        if not words:
            for word in prefixes:
                name, value = _split_assignment(word.text, known)
                _remember(known, known_lines, name, value, word)
                env.append(EnvSetting(name, value, word.line, "export" if auto_export else "shell", file=path))
            continue
        head = words[0].text
        if head in ("export", "declare", "typeset", "local", "readonly") and not words[0].quoted:
            exporting = head == "export"
            args = list(words[1:])
            flags = [w.text for w in args if w.text.startswith("-")]
            if head != "export" and any("x" in f for f in flags):
                exporting = True
            if head == "export" and "-n" in flags:
                exporting = False
            for word in args:
                if word.text.startswith("-"):
                    continue
                if _ASSIGN.match(word.text):
                    name, value = _split_assignment(word.text, known)
                    _remember(known, known_lines, name, value, word)
                    env.append(
                        EnvSetting(name, value, word.line, "export" if exporting or auto_export else "shell", file=path)
                    )
                elif _IDENT.fullmatch(word.text) and exporting:
                    env.append(EnvSetting(word.text, None, word.line, "export", file=path))
            continue
        if head == "unset" and not words[0].quoted:
            for word in words[1:]:
                if _IDENT.fullmatch(word.text):
                    known.pop(word.text, None)
                    env.append(EnvSetting(word.text, None, word.line, "unset", file=path))
            continue
        if head == "set" and len(words) > 1:
            for word in words[1:]:
                if word.text.startswith("-") and "a" in word.text and not word.text.startswith("--"):
                    auto_export = True
                elif word.text.startswith("+") and "a" in word.text:
                    auto_export = False
            continue
        if head in ("source", ".") and len(words) > 1:
            notes.append(f"{path or 'script'}:{words[0].line}: sources {words[1].text}; its settings are not followed")
            continue
        # `env A=B cmd`
        if head == "env" or head.endswith("/env"):
            rest = list(words[1:])
            while rest and (rest[0].text.startswith("-") or _ASSIGN.match(rest[0].text)):
                if _ASSIGN.match(rest[0].text):
                    prefixes.append(rest[0])
                rest = rest[1:]
            words = rest
            if not words:
                continue
        command_line = words[0].line
        prefix_settings = []
        for word in prefixes:
            name, value = _split_assignment(word.text, known)
            prefix_settings.append(EnvSetting(name, value, word.line, "prefix", command_line=command_line, file=path))
        env.extend(prefix_settings)
        # bash -c "..." / sh -c "...": parse the inner script too
        inner = _inner_script(words)
        if inner is not None:
            sub = parse_text(inner.text, path, inner.line, known, known_lines, budget)
            for setting in sub.env:
                env.append(setting)
                if setting.value is not None:
                    known[setting.name] = setting.value
            for cmd in sub.commands:
                commands.append(
                    Command(
                        cmd.words,
                        tuple(prefix_settings) + cmd.env_prefix,
                        cmd.launcher,
                        cmd.program,
                        cmd.program_args,
                        cmd.launcher_options,
                    )
                )
            notes.extend(sub.notes)
            continue
        launchers, program, program_args, options = _split_launcher(words)
        commands.append(Command(tuple(words), tuple(prefix_settings), launchers, program, program_args, options))
    sbatch.update(lexer.sbatch)
    return LaunchScript(path, tuple(env), tuple(commands), sbatch, tuple(notes), lexer.unclosed)


def _remember(known: dict[str, str], lines: dict[str, Any], name: str, value: str, word: Word) -> None:
    """Record an assignment; for ``arr+=( ... )`` keep each part with its own line."""
    appended = "+=" in word.text.split("=", 1)[0] + "=" and isinstance(lines.get(name), list) and value.startswith("(")
    own = word.text.split("=", 1)[1] if "=" in word.text else ""
    if appended and own.startswith("("):
        lines[name] = list(lines[name]) + [(own[1:-1] if own.endswith(")") else own[1:], word.line)]
    elif value.startswith("(") and value.endswith(")"):
        lines[name] = [(value[1:-1], word.line)]
    else:
        lines[name] = word.line
    known[name] = value


class _Branches:
    """if / elif / else / fi with simple test conditions evaluated when every operand is known.

    A branch whose condition is known false is skipped; an unknown condition keeps every
    branch (the conservative reading: settings from all of them are seen).
    """

    def __init__(self) -> None:
        self.frames: list[list[Any]] = []  # [this branch: True/False/None, some branch taken: True/False/None]

    @property
    def active(self) -> bool:
        return all(frame[0] is not False for frame in self.frames)

    def step(self, words: list[Word], sep: str) -> list[Word]:
        """Consume leading if/elif/else/fi words; return what is left to run."""
        while words and not words[0].quoted and words[0].text in ("if", "elif", "else", "fi", "then"):
            head = words[0].text
            if head == "then":
                words = words[1:]
                continue
            if head == "if":
                cond = _test(words[1:], sep) if self.active else False
                self.frames.append([cond, cond])
                return []
            if head == "fi":
                if self.frames:
                    self.frames.pop()
                words = words[1:]
                continue
            if not self.frames:
                words = words[1:]
                continue
            frame = self.frames[-1]
            taken = frame[1]
            if head == "elif":
                cond = _test(words[1:], sep)
                branch = (
                    False if taken is True else (cond if taken is False else (None if cond is not False else False))
                )
                frame[0] = branch
                frame[1] = True if branch is True else (None if branch is None or taken is None else taken)
                return []
            # else
            frame[0] = False if taken is True else (True if taken is False else None)
            frame[1] = True if frame[0] is True else taken
            words = words[1:]
        return words


def _test(words: Sequence[Word], sep: str) -> bool | None:
    """``[[ a == b ]]`` / ``[ a = b ]`` / ``test -z a`` ... when every operand is known."""
    if sep in ("&&", "||", "|"):
        return None  # compound condition: not evaluated
    texts = [w.text for w in words]
    negate = bool(texts) and texts[0] == "!"
    if negate:
        texts = texts[1:]
    if texts[:1] == ["[["] and texts[-1:] == ["]]"] or texts[:1] == ["["] and texts[-1:] == ["]"]:
        inner = texts[1:-1]
    elif texts[:1] == ["test"]:
        inner = texts[1:]
    else:
        return None
    if any("$" in t or "`" in t or "\0" in t for t in inner):
        return None
    result: bool | None = None
    if len(inner) == 3 and inner[1] in ("==", "=", "!="):
        if any(ch in inner[2] for ch in "*?[") and inner[1] != "=":
            return None  # glob pattern
        result = (inner[0] == inner[2]) != (inner[1] == "!=")
    elif len(inner) == 2 and inner[0] in ("-z", "-n"):
        result = (inner[1] == "") == (inner[0] == "-z")
    elif len(inner) == 3 and inner[1] in ("-eq", "-ne", "-lt", "-gt", "-le", "-ge"):
        try:
            a, b = int(inner[0]), int(inner[2])
        except ValueError:
            return None
        result = {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-gt": a > b, "-le": a <= b, "-ge": a >= b}[inner[1]]
    if result is None:
        return None
    return result != negate


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
            if isinstance(where, list):
                parts_with_lines = where
            else:
                body = value[1:-1] if value.startswith("(") and value.endswith(")") else value
                parts_with_lines = [(body, where)]
            inner: list[Word] = []
            for body, first_line in parts_with_lines:
                budget.spend(len(body) + _LEX_COST, name, word.line)  # re-lexing is work even for a short body
                lexer = _Lexer(body, first_line, budget)
                while True:
                    item = lexer.next_command(known)
                    if item is None:
                        break
                    inner.extend(item[0])
            for element in _expand_markers(inner, known, lines, budget, depth + 1):
                budget.spend(len(element.text) + _WORD_COST, name, word.line)
                if split and element.quoted and any(ch.isspace() for ch in element.text):
                    out.extend(Word(piece, element.line, True) for piece in element.text.split())
                else:
                    out.append(element)
            continue
        text = "".join(known.get(part.lstrip("~"), part) if idx % 2 else part for idx, part in enumerate(parts))
        budget.spend(len(text), parts[1].lstrip("~") if len(parts) > 1 else "", word.line)
        out.append(Word(text, word.line, word.quoted))
    return out


_ARITH_NAME = re.compile(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def _arithmetic(expr: str, variables: Mapping[str, str]) -> str | None:
    """``$(( ... ))`` with integers, + - * / % and known variables; None when unsure."""
    import ast

    def substitute(match: re.Match) -> str:
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


def _inner_script(words: Sequence[Word]) -> Word | None:
    for idx, word in enumerate(words[:-1]):
        if (
            os.path.basename(word.text) in ("bash", "sh", "zsh")
            and idx + 2 < len(words)
            and words[idx + 1].text in ("-c", "-lc", "-xc", "-ec", "-exc")
        ):
            return words[idx + 2]
    return None


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


def parse_file(path: str) -> LaunchScript:
    """A launch script from disk; a binary file is bad input (a stray Latin-1 byte is not)."""
    from memtune.errors import InputError
    from memtune.files.textfile import read_text

    text = read_text(path, "a bash / sbatch launch script", strict=False)
    script = parse_text(text, path)
    crlf = text.find("\r\n")
    if crlf >= 0:
        # The reader drops the CR so the rest of the check still works; bash does not, and
        # the check rules report what that does to the run (MT024).
        script = replace(script, crlf_line=text.count("\n", 0, crlf) + 1)
    if script.unclosed_quote is not None:
        # bash itself stops with "unexpected EOF while looking for matching quote"; checking
        # the rest of the file as one long word would only produce nonsense findings
        quote, line = script.unclosed_quote
        raise InputError(
            f"{path}:{line}: the {quote} quote opened on this line is never closed "
            "(bash: unexpected EOF while looking for matching quote); close it"
        )
    return script


# ---------------------------------------------------------------- training arguments


def split_program_args(
    args: Sequence[Word], valueless: frozenset[str] = frozenset()
) -> tuple[dict[str, Flag], list[Override]]:
    """Megatron-LM ``--flags`` and Hydra overrides / Bridge shortcuts among the program's args.

    A flag takes the following words as its values until the next ``-``-word or override;
    ``valueless`` names switches that never take a value (``use-nccl-ub`` ...), so a word
    after them is not swallowed. The last occurrence of a flag wins, as in argparse.
    """
    flags: dict[str, Flag] = {}
    overrides: list[Override] = []
    i, n = 0, len(args)
    while i < n:
        word = args[i]
        text = word.text
        if text in BRIDGE_SHORTCUTS and i + 1 < n:
            value = args[i + 1].text
            overrides.append(Override(BRIDGE_SHORTCUTS[text], value, word.line, "", f"{text} {value}"))
            i += 2
            continue
        if text.startswith("--") and len(text) > 2:
            name, eq, value = text[2:].partition("=")
            values: list[str] = []
            if eq:
                values.append(value)
            elif name not in valueless:
                j = i + 1
                while j < n and not _is_option(args[j].text) and not (is_override(args[j].text) and not args[j].quoted):
                    values.append(args[j].text)
                    j += 1
                i = j - 1
            flags[name] = Flag(name, tuple(values), word.line)
            i += 1
            continue
        if is_override(text):
            override = parse_override(text, word.line)
            if override is not None:
                overrides.append(override)
        i += 1
    return flags, overrides


def _is_option(text: str) -> bool:
    if not text.startswith("-") or text == "-":
        return False
    return not re.fullmatch(r"-\d+(\.\d+)?([eE][+-]?\d+)?", text)


def is_override(text: str) -> bool:
    """A Hydra override word (``key=value``, ``+key=``, ``++key=``, ``~key``)? Shared rule: memtune.spec.overrides."""
    from memtune.spec import overrides

    return overrides.is_override(text)


_OPS = {"set": "", "add": "+", "force": "++", "delete": "~"}


def parse_override(text: str, line: int = 0) -> Override | None:
    """``model.tensor_model_parallel_size=4`` / ``+peft=lora`` / ``~model.x`` -> Override, else None.

    Parsing is memtune.spec.overrides' (Hydra's grammar); this adds the source line and keeps
    the value as written, so a finding can quote it.
    """
    from memtune.spec import overrides
    from memtune.errors import InputError

    if not overrides.is_override(text.strip()):
        return None
    try:
        parsed = overrides.parse_override(text)
    except InputError:
        return None
    value = text.strip().partition("=")[2] if parsed.has_value else None
    return Override(".".join(parsed.path), value, line, _OPS[parsed.op], text)


def iter_words(script: LaunchScript) -> Iterator[Word]:
    for command in script.commands:
        yield from command.words
