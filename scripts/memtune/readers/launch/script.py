"""What a parsed launch script is: words, environment settings, commands, flags, overrides.

Plain frozen records with the line each value came from (a finding has to point at the
line to change); the lexer and the command reader build them, the check rules read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# The phrase that marks an assumption as a guess between branches (not a stated default):
# such a value is treated as unknown by the checks, while a default is used and reported.
BRANCH_GUESS = "inside an if/case branch whose condition is only known at run time"


def is_branch_guess(note: str) -> bool:
    """Was this Word/Flag assumption a pick between branches the reader could not decide?"""
    return BRANCH_GUESS in note


@dataclass(frozen=True)
class Span:
    """Where a stretch ``[start, end)`` of a word's or a value's text came from.

    A string built from many pieces (``CMD="torchrun $DIST ${ARGS} $EXTRA"``) keeps one per
    piece: its source line and what the reader assumed to make it. A word cut from such a
    string later (``bash -c "$CMD"``, an unquoted ``$CMD``) then carries its own piece's
    line and notes, not every note of the whole string.
    """

    start: int
    end: int
    line: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal; ``quoted`` when any part of it was quoted."""

    text: str
    line: int
    quoted: bool = False
    # what the reader assumed to produce this word: a variable taken from its ${X:-default}
    # because the script never sets it, or set in a branch whose condition is unknown
    assumed: tuple[str, ...] = ()
    spans: tuple[Span, ...] = ()  # where each stretch of ``text`` came from (Span)


def slice_spans(spans: Sequence[Span], start: int, end: int, shift: int) -> list[Span]:
    """The spans covering ``[start, end)``, cut to it and moved by ``shift``."""
    out: list[Span] = []
    for span in spans:
        a, b = max(span.start, start), min(span.end, end)
        if a < b:
            out.append(Span(a + shift, b + shift, span.line, span.notes))
    return out


def span_notes(spans: Sequence[Span], start: int, end: int) -> tuple[str, ...]:
    """Every note of the spans overlapping ``[start, end)`` (an empty stretch: the one at start)."""
    end = max(end, start + 1)
    return tuple(dict.fromkeys(note for s in spans if s.start < end and s.end > start for note in s.notes))


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
    assumed: tuple[str, ...] = ()  # the reader's assumptions behind the flag or its values (Word.assumed)

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
    # where the command runs, when that is not where its words were written: a `bash -c "...
    # $CMD"` runs CMD (defined on an earlier line) at the end of the inner script
    run_line: int = 0

    @property
    def line(self) -> int:
        return self.words[0].line if self.words else 0

    @property
    def starts_at(self) -> int:
        """The line the command runs at: settings after it do not reach it."""
        return max(self.run_line, self.line)

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
    # command substitutions as written -> (line, settings they may pass): never run (Budget.substitutions)
    substitutions: Mapping[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)

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
        limit = command.starts_at if command is not None else 1 << 62
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

    def alloc_conf_for(self, command: Command | None) -> tuple[str, str] | None:
        """The allocator setting ``command`` starts with, as (variable, value):
        PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF; None when the script sets neither."""
        env = self.env_for(command)
        setting = env.get("PYTORCH_CUDA_ALLOC_CONF") or env.get("PYTORCH_ALLOC_CONF")
        return (setting.name, setting.value) if setting is not None and setting.value is not None else None

    def later_settings(self, command: Command, name: str) -> list[EnvSetting]:
        """Assignments of ``name`` that come after ``command`` (too late to affect it)."""
        return [s for s in self.env if s.name == name and s.how != "prefix" and s.line > command.starts_at]


_WORLD_OPTIONS = (
    "nproc_per_node",
    "nproc-per-node",
    "nnodes",
    "ntasks-per-node",
    "nodes",
    "N",
    "num_gpus",
    "num-gpus",
    "num_nodes",
    "num-nodes",
    "np",
    "npernode",
    "ntasks",
)


def world_size_assumptions(command: Command) -> list[str]:
    """What the reader assumed behind the launcher's GPU-count options (``--nnodes $NNODES``
    where NNODES came from ``${SLURM_NNODES:-1}``): the world size rests on these."""
    words = list(command.words)
    notes: list[str] = []
    for idx, word in enumerate(words):
        key, eq, _ = word.text.lstrip("-").partition("=")
        if not word.text.startswith("-") or key not in _WORLD_OPTIONS:
            continue
        value = word if eq else (words[idx + 1] if idx + 1 < len(words) else None)
        if value is not None:
            notes.extend(value.assumed)
    return list(dict.fromkeys(notes))
