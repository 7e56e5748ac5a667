"""The bound on how much text variable expansion may produce for one launch script.

``A=$A$A`` doubles per line and an array appended to itself grows geometrically, so every
lexer of one script (nested ones included) spends from one shared budget; past it the
script is refused with a one-line "expansion too large" error instead of exhausting memory.
"""

from __future__ import annotations

from memtune.errors import InputError
from memtune.readers.launch.script import Span

# All the text variable and array expansion may produce for one script, together. A real
# launch script expands a few kilobytes; bash itself would need gigabytes past this.
MAX_EXPANSION_CHARS = 8 << 20


_LEX_COST = 256  # what re-lexing an array's definition costs beyond its length, in the same units


_WORD_COST = 16  # what handing one expanded word up one level costs


class ExpansionTooLarge(InputError):
    """The script's variable expansion outgrew MAX_EXPANSION_CHARS (one line, exit 2)."""


class _Budget:
    """The expansion output one script may still produce, shared by every nested lexer."""

    __slots__ = ("left", "origins", "path", "spans", "substitutions")

    def __init__(self, path: str) -> None:
        self.left = MAX_EXPANSION_CHARS
        self.path = path
        # variable -> what its value assumes (a default for an unset variable, an unknown
        # branch); shared like the budget so nested lexers mark the words they expand
        self.origins: dict[str, tuple[str, ...]] = {}
        # variable -> (its value, where each stretch of it came from): per-piece provenance
        self.spans: dict[str, tuple[str, tuple[Span, ...]]] = {}
        # command substitution as written -> (line bash runs it on, settings it may pass):
        # never run, so whatever it prints is only known when the job runs
        self.substitutions: dict[str, tuple[int, tuple[str, ...]]] = {}

    def spend(self, amount: int, name: str, line: int) -> None:
        self.left -= amount
        if self.left < 0:
            raise ExpansionTooLarge(
                f"{self.path or 'script'}:{line}: expansion too large: expanding ${name} takes the script past "
                f"{MAX_EXPANSION_CHARS >> 20} MiB of expanded text (a variable that repeats itself, like A=$A$A, "
                "or an array appended to itself); simplify the script"
            )
