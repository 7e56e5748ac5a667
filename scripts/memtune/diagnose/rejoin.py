"""Re-join an allocator OOM message that something wrapped over several lines.

PyTorch prints its OOM message as one line; what users paste is often wrapped:

* a terminal or log viewer breaks it at a fixed column, inside a word or a number
  (``... 0 bytes fre`` / ``e; ...``, ``79.`` / ``11 GiB``), and a copy keeps the breaks;
* a launcher or logging framework prefixes only the first line (``[rank5]:``, Slurm's
  ``srun -l`` ``5: ``, torchrun's ``[default5]:``), so the continuation lines carry no
  rank at all and, in a multi-rank log, other ranks' lines sit between them.

Two questions follow, answered here from the message's own grammar rather than per
sample: where a break was (glue the pieces, or put the space back?), and which pending
message an unprefixed line continues (the one it makes more of).  Both only ever use the
words the allocator prints (data/allocator_wording.yaml plus the allocator examples in
oom_patterns.yaml), so a new wording added to the data is handled the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from memtune.diagnose import parse as oom_parse
from memtune.diagnose.patterns import ALLOCATOR_KINDS, load_patterns
from memtune.files.data_yaml import load_data_yaml
from memtune.files.paths import DATA_DIR

WORDING_FILE = DATA_DIR / "allocator_wording.yaml"

_WORD = re.compile(r"[A-Za-z]+")
_TAIL_WORD = re.compile(r"[A-Za-z]{1,40}$")
_HEAD_WORD = re.compile(r"^[A-Za-z]{1,40}")
# Characters never followed (left side) or preceded (right side) by a space inside the
# message: an identifier, a hyphenated word, a closing mark, a decimal point.
_GLUE_LEFT = tuple("-_=/(")
_GLUE_RIGHT = tuple(".,;:)-_=/")
_DIGIT_END = re.compile(r"\d\.?$")


@lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """Lower-cased words of every allocator message wording PyTorch has printed."""
    doc = load_data_yaml(WORDING_FILE)
    texts: list[str] = [str(s) for s in doc.get("sentences", ())] + [str(u) for u in doc.get("units", ())]
    patterns = load_patterns()
    texts += [e for kind in ALLOCATOR_KINDS if kind in patterns.kinds for e in patterns.kinds[kind].examples]
    return frozenset(w.lower() for text in texts for w in _WORD.findall(text))


def glue(left: str, right: str) -> bool:
    """Was the boundary between two wrapped pieces inside a word or number (no space)?

    Visible whitespace on either side means the break was at a space.  Otherwise the
    pieces are glued when a number was cut (``79.`` / ``11``), when a piece ends or starts
    with a mark that never touches a space in the message (``non-`` / ``PyTorch``,
    ``GiB`` / ``.``), or when the two word halves only make a message word together
    (``fre`` + ``e``, ``Mi`` + ``B``, ``allocat`` + ``ed``; but not ``GiB`` + ``of``).
    """
    if not left or not right or left[-1].isspace() or right[0].isspace():
        return False
    left, right = left[-64:], right[:64]  # only the edges matter: bounded work per boundary
    if _DIGIT_END.search(left) and right[0].isdigit():
        return True
    if left.endswith(_GLUE_LEFT) or right.startswith(_GLUE_RIGHT):
        return True
    tail, head = _TAIL_WORD.search(left), _HEAD_WORD.match(right)
    if not tail or not head:
        return False
    words = vocabulary()
    a, b = tail.group().lower(), head.group().lower()
    return (a + b) in words and not (a in words and b in words)


def join(parts: Iterable[str]) -> str:
    """The pieces of one message as one line, spaces only where the message had them."""
    out = ""
    for part in parts:
        if not part.strip():
            continue
        if out and not glue(out, part):
            out += " "
        out += part
    return re.sub(r"\s+", " ", out).strip()


def progress(text: str) -> int:
    """How much of the message's grammar ``text`` holds: numbers read, plus completion."""
    nums = oom_parse.parse_allocator_message(text)
    known = sum(v is not None for v in nums.as_json().values())
    return known + (1 if nums.device is not None else 0) + (2 if oom_parse.is_complete(text) else 0)


def wording_share(text: str) -> float:
    """Share of ``text``'s words (2+ letters) that the allocator message uses."""
    words = [w.lower() for w in _WORD.findall(text) if len(w) > 1]
    if not words:
        return 1.0 if re.search(r"\d", text) else 0.0  # a lone number continues a cut one
    vocab = vocabulary()
    return sum(w in vocab for w in words) / len(words)
