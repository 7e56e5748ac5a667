"""Deterministic grading of one agent answer: does it make the right claims, and no wrong one?

Why claims and not words: an answer that says "do not raise TP first" and one that says
"raise TP first" share every keyword. A check that only looks for words passes both, so
it measures vocabulary, not correctness. Here each task lists

- **required claims** — a statement the answer must make, each with the many wordings
  people use for it, matched only where the answer *asserts* it (not under "not",
  "instead of", "rather than", "it is a myth that", or in a question);
- **wrong claims** — statements that make the answer wrong (the common mistakes for that
  task: "raise TP first", "VPP is a memory fix", "the all-reduce is cheap"); asserting one
  fails the whole answer, and the same negation rules keep "do not raise TP first" from
  counting as one;
- **numbers** — a value with a tolerance, a size with its unit (GiB/GB/MiB/bytes, both
  readings of the prefix), or a percentage;
- the **command** the agent should have run (not part of the content score).

Claims shared by many tasks live in evals/claims.yaml and are referenced by id; the
dataset loader resolves them, so this module only sees plain dictionaries and stays a set
of pure functions.

Scoring, in words (``content_score``):
1. a wrong claim asserted -> 0;
2. otherwise the share of required claims and numbers passed;
3. but a failed *key* check (by default every number, and each claim marked ``key``) means
   the answer missed the point of the task (the user's number, the verdict, the fix): it is
   a wrong answer, and keeps only ``KEY_MISS_SCALE`` of its share (at most 0.1), enough to
   order wrong answers among themselves and no more.
``solved`` additionally needs every key check, a score of at least ``SOLVED_AT`` and the
command check.

Only the standard library is imported: the CLI's --help must work without third-party
packages.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from memtune.bench.tools import HELPERS

FLAGS = re.IGNORECASE | re.MULTILINE

KEY_MISS_SCALE = 0.1  # an answer that misses a key point keeps a tenth of its partial credit
SOLVED_AT = 0.8  # and a solved one at least this

# A number as people write it in answers: 1,024 / 58.8 / -28.4 / 4.731e9 / .5
_NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\d.]\d)(?!\d)")


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict.

    ``kind``: claim / wrong / number / command (older runs also hold must_include /
    must_not_include). For a ``wrong`` check ``passed`` means the answer did *not* assert it.
    ``key``: a failed key check caps the content score (see the module docstring)."""

    kind: str
    label: str
    passed: bool
    detail: str = ""
    key: bool = False


@dataclass(frozen=True)
class SecurityRule:
    id: str
    pattern: str
    why: str


@dataclass(frozen=True)
class Grade:
    """The grade of one answer.

    ``content_score``: in [0, 1], see the module docstring — what the report calls
    Correctness. ``solved``: no wrong claim, every key check, score >= SOLVED_AT and the
    command check — what the report calls Effectiveness. ``security_violations``: ids of
    the security rules the answer or the commands the agent ran broke.
    """

    checks: tuple[CheckResult, ...]
    content_score: float
    solved: bool
    command_ok: bool | None
    security_violations: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["checks"] = [asdict(c) for c in self.checks]
        doc["security_violations"] = list(self.security_violations)
        return doc

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Grade:
        return Grade(
            checks=tuple(CheckResult(**c) for c in doc["checks"]),
            content_score=float(doc["content_score"]),
            solved=bool(doc["solved"]),
            command_ok=doc.get("command_ok"),
            security_violations=tuple(doc.get("security_violations", ())),
        )


# ---------------------------------------------------------------------------------------
# Numbers


def extract_numbers(text: str) -> list[float]:
    """Every number written in ``text`` (thousands separators and a Unicode minus accepted)."""
    found = []
    for match in _NUMBER.finditer(text):
        token = match.group(0)
        if not any(ch.isdigit() for ch in token):
            continue
        token = token.replace(",", "").replace("−", "-")
        try:
            value = float(token)
        except ValueError:
            continue
        if math.isfinite(value):
            found.append(value)
    return found


def number_matches(spec: Mapping[str, Any], numbers: Iterable[float]) -> float | None:
    """The first number within tolerance of the spec's value or an alternative, else None.

    Signs are ignored ("-28.4%" and "28.4% slower" say the same thing). Without a stated
    tolerance a number must match to 1e-9 relative.
    """
    targets = [float(spec["value"]), *map(float, spec.get("alternatives", ()))]
    absolute = float(spec.get("tolerance", 0.0))
    relative = float(spec.get("rel_tolerance", 0.0))
    for number in numbers:
        for target in targets:
            allowed = max(absolute, relative * abs(target), 1e-9 * abs(target))
            if abs(abs(number) - abs(target)) <= allowed:
                return number
    return None


# A percentage: "28.4%", "-28.4 %", "28.4 percent", "28.4 pct".
_PERCENT = re.compile(
    r"(?<![\w.])[-+−]?(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)\s*(?:%|per\s?cent\b|pct\b)", re.IGNORECASE
)


def extract_percentages(text: str) -> list[float]:
    """Every number written as a percentage (the sign dropped: "-6%" and "6% slower" agree)."""
    return [float(m.group(1).replace(",", "")) for m in _PERCENT.finditer(text)]


# A size as answers write it: "172 MiB", "2.84GiB", "147.4 GB", "40,406,826,834,985 bytes".
_SIZE = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(k)?\s*"
    r"(TiB|GiB|MiB|KiB|TB|GB|MB|KB|bytes|byte|B)(?![A-Za-z])",
    re.IGNORECASE,
)
_PREFIX = {"k": 1, "m": 2, "g": 3, "t": 4}


def significant_digits(number: str) -> int:
    """Digits that carry information: "0.05" has 1, "172" and "2.8" have 3 and 2, "80" has 2."""
    digits = number.replace(",", "").replace(".", "").lstrip("0")
    return len(digits)


def extract_sizes(text: str) -> list[tuple[str, tuple[float, ...], float]]:
    """Every size written with a unit: (as written, candidate byte values, rounding allowance).

    Why two candidates: "GB" and "GiB" are used interchangeably in training logs and
    tools (PyTorch prints GiB, many dashboards print the same number as GB), so a prefix
    is read both ways. Why an allowance: "0.17 GiB" is an honest rounding of 172 MiB; the
    last written digit may be off by half a unit (never credited beyond 5%, see
    size_matches)."""
    found = []
    for match in _SIZE.finditer(text):
        number, unit = match.group(1).replace(",", ""), match.group(3).lower()
        thousands = 1000.0 if match.group(2) else 1.0  # "37.6k GiB"
        value = float(number) * thousands
        decimals = len(number.split(".", 1)[1]) if "." in number else 0
        power = _PREFIX.get(unit[0], 0) if unit not in ("b", "byte", "bytes") else 0
        scales = (1.0,) if power == 0 else (1000.0**power, 1024.0**power)
        candidates = tuple(value * scale for scale in scales)
        allowance = 0.5 * 10.0**-decimals * max(scales) * thousands
        found.append((match.group(0), candidates, allowance))
    return found


#: How close a number with fewer than ``min_digits`` digits must be to count: it is the value.
EXACT_SHARE = 0.001
#: "4.69 → 7.58 GiB", "from 4.69 to 7.58 GiB": a before/after pair, for ``delta`` checks.
_PAIR = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)\s*(?:(TiB|GiB|MiB|TB|GB|MB)\s*)?(?:→|->|=>|⇒|\bto\b)\s*(\d+(?:\.\d+)?)\s*"
    r"(TiB|GiB|MiB|TB|GB|MB)(?![A-Za-z])",
    re.IGNORECASE,
)


def pair_sizes(text: str) -> list[str]:
    """Each before/after pair rewritten as its difference ("+2.89 GiB" for "4.69 → 7.58 GiB"),
    so a growth check accepts an answer that gives both ends instead of the difference."""
    out = []
    for m in _PAIR.finditer(text):
        if m.group(2) and m.group(2).lower() != m.group(4).lower():
            continue
        before, after = m.group(1), m.group(3)
        decimals = max(len(x.split(".", 1)[1]) if "." in x else 0 for x in (before, after))
        out.append(f"{float(after) - float(before):.{decimals}f} {m.group(4)}")
    return out


def size_matches(spec: Mapping[str, Any], text: str) -> str | None:
    """The first size in ``text`` within tolerance of ``spec["bytes"]`` or one of its
    ``alternatives_bytes`` (as written), else None.

    A helper's number must carry its unit, and at least ``min_digits`` significant digits
    (default 2): a bare "172" could be anything, and a one-digit "~3 GB" from SKILL.md's
    measured tables lies near many users' numbers by coincidence. A spec whose own
    input is that coarse (values rounded to 0.01 GiB) sets ``min_digits`` to 1."""
    targets = [float(spec["bytes"]), *map(float, spec.get("alternatives_bytes", ()))]
    relative = float(spec.get("rel_tolerance", 0.02))
    min_digits = int(spec.get("min_digits", 2))
    for written, candidates, allowance in extract_sizes(text):
        number = _SIZE.match(written)
        assert number is not None, written  # ``written`` is a whole _SIZE match, so it matches again
        digits_ok = significant_digits(number.group(1)) >= min_digits
        for target in targets:
            if not digits_ok and not any(abs(c - target) <= EXACT_SHARE * target for c in candidates):
                continue  # a short number counts only where it is the value itself ("1 GiB" for 1.00 GiB)
            allowed = max(relative * target, min(allowance, 0.05 * target))
            if any(abs(c - target) <= allowed for c in candidates):
                return written
    return None


_UNIT_CELL = re.compile(r"\b(TiB|GiB|MiB|TB|GB|MB)\b")
_BARE_CELL = re.compile(r"^(\s*[~≈]?\s*)([-+]?\d+(?:\.\d+)?)(\s*)$")


def _with_unit(cell: str, unit: str) -> str:
    m = _BARE_CELL.match(cell)
    return f"{m.group(1)}{m.group(2)} {unit}{m.group(3)}" if m else cell


def with_table_units(text: str) -> str:
    """The answer with the unit of a markdown table's column header written after each bare
    number in that column ("| Failed request | 448.00 |" under "| | MiB |" reads "448.00 MiB"):
    a table that names its unit once states every size in it."""
    out: list[str] = []
    units: dict[int, str] = {}
    header_seen = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if not stripped.startswith("|"):
            units, header_seen = {}, False
            out.append(line)
            continue
        cells = stripped.strip("|").split("|")
        if all(re.fullmatch(r"\s*:?-{2,}:?\s*", c) for c in cells):
            out.append(line)
            continue
        if not header_seen:  # the first row of a table is its header
            header_seen = True
            units = {i: m.group(1) for i, c in enumerate(cells) if (m := _UNIT_CELL.search(c))}
            out.append(line)
            continue
        filled = [_with_unit(c, units[i]) if i in units else c for i, c in enumerate(cells)]
        out.append("|" + "|".join(filled) + "|" + ("\n" if line.endswith("\n") else ""))
    return "".join(out)


def check_number(spec: Mapping[str, Any], answer: str) -> CheckResult:
    """A ``numbers`` entry: a size (``bytes``), a percentage (``unit: "%"``) or a plain value."""
    label, key = str(spec["label"]), bool(spec.get("key", True))
    if "bytes" in spec:
        written = size_matches(spec, answer)
        if written is None and spec.get("delta"):
            written = next((d for d in pair_sizes(answer) if size_matches(spec, d)), None)
        return CheckResult("number", label, written is not None, written or "", key)
    values = extract_percentages(answer) if spec.get("unit") == "%" else extract_numbers(answer)
    hit = number_matches(spec, values)
    return CheckResult("number", label, hit is not None, "" if hit is None else repr(hit), key)


# ---------------------------------------------------------------------------------------
# Claims: where a wording is asserted, and where it is denied


@dataclass(frozen=True)
class Span:
    """A stretch of the answer that asserts or denies things as one unit."""

    start: int
    end: int
    sentence_start: int
    question: bool  # the sentence ends in "?": it asks, it does not assert


# Sentences end at . ! ? followed by a space (so "2.84", "diagnose.py" and
# "expandable_segments:True" stay whole), at blank lines, before a list item, heading or table
# row, and at line breaks, except one inside wrapped prose (a word or comma, then a lower-case
# word on the next line).
_SENTENCE_END = re.compile(
    r"(?<=[.!?])[\"')\]*_]*\s+|\n\s*\n\s*|\n\s*(?=[-*+]\s|\d+[.)]\s|#|\|)|\|\s*\n"
    r"|(?<![A-Za-z,])\n\s*|\n\s*(?=[^a-z(`\s])"  # a line break inside wrapped prose joins two lines
)
# Clauses: a negation reaches to the end of its clause, not beyond. "It is not capacity,
# it is fragmentation" denies capacity only; "do not panic; raise TP" denies nothing. A comma
# before a number does not end a clause ("legal sizes are 2, 4, 5, 10" is one list), and a
# short label's colon does not either ("Ranks 0-2: unchanged", "Diagnosis: capacity"; see
# spans), unless the label itself denies ("Not capacity: fragmentation").
_CLAUSE_BREAK = re.compile(
    r"[;()\[\]]|,(?!\s*\d)|:[*_]*\s(?!\s*[`'\"]?(?:true|false|\d)\b)|\s[—–-]{1,2}\s|—"
    r"|\b(?:but|however|whereas|although|though|so|therefore|thus|hence|because|since|yet|otherwise)\b",
    re.IGNORECASE,
)

# Words that deny what follows them in the same clause ("do not raise TP", "rather than
# raising TP", "the myth that VPP saves memory", "a common mistake is to raise TP").
_DENY_BEFORE = re.compile(
    r"\b(?:not|no|never|none|nothing|neither|nor|without|cannot|avoid\w*|instead\s+of|rather\s+than|"
    r"refrain\w*|resist\w*|against|unnecessary|needless|myths?|misconceptions?|mistaken(?:ly)?|mistakes?|"
    r"barely|hardly|scarcely|marginally|negligibly|unlikely|doubt\w*|ruled?\s+out|rule\s+out|exclude[sd]?|"
    r"(?:different|distinct|apart|separat\w*|distinguish\w*|tell\w*)\b[^.;]{0,40}\bfrom|"
    r"wrong(?:ly)?|false(?:ly)?|incorrect(?:ly)?|bogus|tempting|tempted|skip|stop|forget|ignore|"
    r"unlike)\b|\w+n[’']t\b",
    re.IGNORECASE,
)
# Words right after a wording that deny it: "raising TP is not the fix",
# "VPP won't help", "raising TP is a last resort".
_DENY_AFTER = re.compile(
    r"^\W*(?:\w+\W+){0,6}?(?:"
    r"(?:is|are|was|were|'s)\s+(?:not|never|n[’']t)\b|(?:isn[’']t|aren[’']t|wasn[’']t|weren[’']t)\b"
    r"|(?:would|will|does|do|did|should|can|could)\s*(?:not|n[’']t)\s+(?:help|work|fix|solve|matter|save|reduce|cut|"
    r"change|apply|tell|show|reveal|be\s+(?:the|a|needed|necessary|enough|right|useful|worth))"
    r"|(?:won[’']t|wouldn[’']t|doesn[’']t|don[’']t|didn[’']t|shouldn[’']t|can[’']t|cannot)\s+"
    r"(?:help|work|fix|solve|matter|save|reduce|cut|change|apply|tell|show|reveal|"
    r"be\s+(?:the|a|needed|necessary|enough|right|useful|worth))"
    r"|(?:is|are|would\s+be|'s)\s+(?:a\s+|the\s+)?(?:myth|mistake|wrong|false|incorrect|misconception|bad\s+idea|"
    r"last\s+resort|red\s+herring|not\s+needed|unnecessary|pointless|useless|counterproductive)"
    r"|(?:only\s+)?as\s+a\s+(?:last\s+resort|fallback)|(?:is\s+)?(?:only\s+)?(?:a\s+)?last\s+resort"
    r"|(?:is|are|seems?|looks?)\s+(?:\w+\s+)?(?:unlikely|improbable|not\s+likely|ruled\s+out|excluded)"
    r"|(?:would|will)\s+(?:only\s+|just\s+)?(?:cost|hurt|slow|lose)\b|costs?\s+(?:\w+\s+){0,3}?(?:throughput|speed|performance)"
    # a hypothetical that describes what is not seen: "a real capacity shortfall would hit every rank"
    r"|would\s+(?:hit|show|look|appear|affect|strike|fail\s+on|be\s+(?:visible|seen|consistent))\b"
    r")",
    re.IGNORECASE,
)
_AFTER_STOP = re.compile(r"\b(?:and|that|which|while|whereas|who|where|when|whose)\b", re.IGNORECASE)

# For a wrong claim only: a recommendation kept for later is not the recommendation
# ("only if that is not enough, raise TP", "raise TP as a last resort").
_HEDGE_SENTENCE = re.compile(
    r"\b(?:if|unless|whether|only\s+(?:if|when|after|as|then|once)|last\s+resort|fallback|later|eventually|"
    r"afterwards|after\s+that)\b",
    re.IGNORECASE,
)
_HEDGE_AFTER = re.compile(
    r"^[^.;!?]{0,40}?\b(?:if\s+(?:needed|necessary|required|(?:it|that|this|you)\b)|only\s+if|as\s+a\s+"
    r"(?:last\s+resort|fallback)|last\s+resort|later|afterwards|(?:only\s+)?at\s+the\s+(?:very\s+)?end|"
    r"last(?!\s+(?:step|layer|stage|rank|iteration)))\b",
    re.IGNORECASE,
)


#: An allocator setting as an answer writes it: ``PYTORCH_CUDA_ALLOC_CONF=backend:...``.
_ALLOC_CONF = re.compile(r"PYTORCH(?:_CUDA)?_ALLOC_CONF\s{0,3}=\s{0,3}[\"'`]?([^\s\"'`]{1,200})")


#: One of this skill's helpers on a command line, and the rest of that line (up to a code tick).
_HELPER_CALL = re.compile(r"scripts/(" + "|".join(HELPERS) + r")\.py([^\n`]{0,400}?)(?=scripts/|[\n`]|$)")
_OPTION = re.compile(r"(?<![\w-])--[A-Za-z][\w-]{0,60}")
_COMMAND_END = re.compile(r"[;(|]|\bthen\b|\band\b|\bor\b|python3?\s|scripts/")


@functools.cache
def helper_options(helper: str) -> frozenset[str]:
    """Every option the helper's command line accepts, read from its click command."""
    import importlib

    command = importlib.import_module(f"memtune.commands.{helper}").command
    names = {"--help"}
    for param in command.params:
        names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return frozenset(names)


def unknown_helper_options(answer: str) -> list[str]:
    """Options the answer passes to one of this skill's helpers that the helper does not have
    (``trace_regression.py --fail-on-oom``): an invented interface, told apart by the helper's
    own command line. Each is returned once, as the option."""
    out: list[str] = []
    for m in _HELPER_CALL.finditer(answer):
        known = helper_options(m.group(1))
        # the helper's own arguments end where another command or clause begins
        rest = _COMMAND_END.split(m.group(2), maxsplit=1)[0]
        for option in _OPTION.findall(rest):
            # a shortened real option ("--seq" for --seq-length) is a slip, not an invention
            if option not in known and option not in out and not any(k.startswith(option) for k in known):
                out.append(option)
    return out


#: Tools whose options an answer may name beside Megatron-LM's and whose spellings can start like
#: Megatron's (vLLM ``--max-num-seqs``, ms-swift ``--max_length``): an answer that names one is
#: not held to Megatron-LM's option list.
_OTHER_TOOL = re.compile(
    r"\b(?:vLLM|SGLang|TensorRT|TRT-LLM|TGI|text-generation-inference|ms-swift|swift\s+sft|Megatron-SWIFT|"
    r"DeepSpeed|LLaMA-Factory|llamafactory|accelerate\s+launch|nsys|Nsight|NeMo-RL|verl|OpenRLHF)\b",
    re.IGNORECASE,
)


def options_in(text: str) -> list[str]:
    """The ``--options`` written in ``text``, each once, in order."""
    return list(dict.fromkeys(_OPTION.findall(text)))


def option_name(option: str) -> str:
    """``--Overlap-Grad-Reduce`` -> ``overlap_grad_reduce``: how data/megatron_flags.yaml writes names."""
    return option.lstrip("-").replace("-", "_").lower()


def option_family(name: str) -> str:
    """The first two words of an option name (``overlap_grad`` of ``overlap_grad_reduce``)."""
    return "_".join(name.split("_")[:2])


@functools.cache
def megatron_options() -> tuple[frozenset[str], frozenset[str]]:
    """(names, families) of every option Megatron-LM's training arguments have or once had,
    with the Megatron-DeepSpeed spellings the launch-script reader knows."""
    from memtune.readers.megatron_flags import flag_classes

    table = flag_classes()
    names = table.arguments | table.removed | table.modelled | table.deepspeed_neutral
    return frozenset(names), frozenset(option_family(n) for n in names if "_" in n)


def unknown_megatron_options(answer: str, given: Iterable[str] = ()) -> list[str]:
    """Megatron-LM-looking options that Megatron-LM has never had (``--overlap-grad-allreduce``,
    ``--overlap-param-scatter``): each starts like a family of real options but is none of them.

    Why the family rule: answers also name options of other tools (nsys ``--capture-range``,
    srun ``--container-image``) that no list here can hold, and those seldom begin like a
    Megatron option; an invented Megatron flag almost always does, because it is a real one
    misremembered. Where they can collide (vLLM ``--max-num-seqs`` against Megatron-LM's
    ``--max-num-samples``) the answer names the other tool, and is then not checked. Options
    this skill's helpers accept, and the user's own (in the question or files), are left out. Imported lazily: this module stays importable with the
    standard library."""
    if _OTHER_TOOL.search(answer):
        return []
    names, families = megatron_options()
    mine = {option_name(o) for o in given}
    for helper in HELPERS:
        mine.update(option_name(o) for o in helper_options(helper))
    out: list[str] = []
    for option in _OPTION.findall(answer):
        name = option_name(option)
        if name in names or name in mine or "_" not in name or option in out:
            continue
        if option_family(name) in families:
            out.append(option)
    return out


#: A template standing for a value, not a value: ``VALUE``, ``OPTIONS``.
_PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")


def alloc_conf_values(text: str) -> list[str]:
    """The allocator strings set in ``text`` (trailing sentence punctuation left out)."""
    out: list[str] = []
    for m in _ALLOC_CONF.finditer(text):
        value = m.group(1).rstrip(".,;:)!?")
        if value and value not in out:
            out.append(value)
    return out


def rejected_alloc_settings(answer: str, given: Iterable[str] = ()) -> list[str]:
    """Allocator strings the answer sets that every PyTorch release the project knows rejects
    (an option or backend that does not exist: ``backend:cudaMallocManaged``), leaving out the
    ones the user gave (an answer may quote the user's broken string to explain it).

    Why: an invented setting is the wrong answer no task's claims can list in advance, and the
    project's own parser of PyTorch's allocator grammar (memtune.readers.alloc_conf) can tell it.
    Imported here, not at the top: this module stays importable with the standard library."""
    from memtune.readers.alloc_conf import parse

    known = set(given)
    out = []
    for value in alloc_conf_values(answer):
        if value in known or _PLACEHOLDER.fullmatch(value) or any(c in value for c in "$<{") or "..." in value:
            continue  # the user's own string, or a template (VALUE, $VAR, <value>, ...) rather than a setting
        try:
            verdicts = parse(value).verdicts
        except Exception:  # noqa: BLE001 - a string the parser cannot even judge is not graded
            continue
        if verdicts and not any(v.accepted for v in verdicts):
            out.append(value)
    return out


#: The empty brackets of a call written in prose: ``torch.cuda.empty_cache()``.
_EMPTY_CALL = re.compile(r"(?<=\w)\(\s*\)")

#: A bracketed figure ("(~28%)", "(1-2%)", "(410 MiB)", "(-4.7 GB)"): not a clause of its own.
_NUMERIC_ASIDE = re.compile(r"\(\s*[~≈<>±+\-−]?\s*\d[^()]{0,24}\)")

#: A label before a colon: at most this many words (a bullet's or a table cell's heading).
LABEL_WORDS = 4


def _is_label(segment: str) -> bool:
    """A short heading such as "Ranks 0-2" or "**Fix**" that the text after its colon completes;
    a denying one ("Not capacity") keeps its colon a clause break."""
    words = re.findall(r"[\w.%/-]+", segment)
    return 0 < len(words) <= LABEL_WORDS and not _DENY_BEFORE.search(segment) and not _CLAUSE_WORDS.search(segment)


#: Words that make the text before a colon a clause of its own ("It will start: ..."), not a label.
_CLAUSE_WORDS = re.compile(
    r"^\W*(?:it|this|that|they|we|you|i|he|she)\b|\b(?:is|are|was|were|will|would|can|could|should|shall|"
    r"does|do|did|has|have|had|may|might|must)\b",
    re.IGNORECASE,
)


def spans(text: str) -> list[Span]:
    """The answer cut into clauses, each knowing its sentence's start and mood."""
    out: list[Span] = []
    pos = 0
    for match in [*_SENTENCE_END.finditer(text), None]:
        end = match.start() if match else len(text)
        sentence = text[pos:end]
        stripped = sentence.rstrip().rstrip("*_\"')]")  # "**Q: Fragmentation again?**" asks
        question = stripped.endswith("?")
        cut = pos
        values: list[int] = []  # where a joined label's value starts: a clause start too ("Short answer: no")
        inline = {i for m in _NUMERIC_ASIDE.finditer(sentence) for i in (m.start(), m.end() - 1)}
        for brk in _CLAUSE_BREAK.finditer(sentence):
            if brk.group(0).startswith(":") and _is_label(text[cut : pos + brk.start()]):
                values.append(pos + brk.end())  # "Label: value" reads as one statement
                continue
            if brk.start() in inline:
                continue  # "TP8 (~28%)": a figure in brackets belongs to the words before it
            out += [Span(c, pos + brk.start(), pos, question) for c in (cut, *values)]
            cut, values = pos + brk.end(), []
        out += [Span(c, end, pos, question) for c in (cut, *values)]
        pos = match.end() if match else len(text)
    return [s for s in out if text[s.start : s.end].strip()]


@dataclass(frozen=True)
class ClaimMatch:
    """Where a claim's wording was found, and whether the answer asserts it there."""

    text: str
    asserted: bool
    why: str


#: "instead of" / "rather than" deny the words right after them ("rather than raising TP"),
#: not the rest of a long clause ("instead of saving the gathered input for the LoRA-A matmul on
#: linear_qkv, it saves ..."): a wording further than this many words away is not denied by them.
CONTRAST_REACH_WORDS = 5
_CONTRAST = re.compile(r"^(?:instead\s+of|rather\s+than)$", re.IGNORECASE)


_ARROW = re.compile(r"→|=>|⇒|->")


def _denial_before(before: str, start: int) -> re.Match[str] | None:
    """The first denial in ``before`` that reaches the wording at ``start``: not one before an
    arrow (the arrow states a conclusion: "not contiguously -> fragmentation")."""
    for deny in _DENY_BEFORE.finditer(before):
        between = before[deny.end() : start]
        if _CONTRAST.match(deny.group(0)) and len(re.findall(r"\w+", between)) > CONTRAST_REACH_WORDS:
            continue
        if _ARROW.search(between):
            continue
        return deny
    return None


def _find(pattern: str, answer: str, clauses: Sequence[Span], negative: bool, hedged_ok: bool) -> list[ClaimMatch]:
    """Each place ``pattern`` matches inside one clause, with its polarity.

    ``negative``: the wording itself carries a negation ("no layout change"), so its own
    "no" does not deny it. ``hedged_ok``: a hedge ("if needed", "as a last resort") leaves
    the claim unasserted — used for wrong claims, which are recommendations."""
    found = []
    for span in clauses:
        part = answer[span.start : span.end]
        for m in re.finditer(pattern, part, FLAGS):
            if not m.group(0).strip():
                continue
            # For a wrong claim a denial inside the wording counts too ("VPP does not reduce
            # memory" is not "VPP reduces memory"). A required claim is often a negative fact
            # itself ("NCCL could not allocate its buffers"), so only what comes before it denies it.
            deny = _denial_before(part[: m.end()] if hedged_ok and not negative else part[: m.start()], m.start())
            after = answer[span.start + m.end() : span.end]
            # a denial after the wording belongs to it only up to the next conjunction:
            # "offloading with PP 4 (error) and a warning that X is not set" denies X, not offloading
            after = _AFTER_STOP.split(after, maxsplit=1)[0]
            if deny:
                found.append(ClaimMatch(m.group(0), False, f"denied by {deny.group(0)!r}"))
                continue
            deny_after = _DENY_AFTER.search(after)
            if deny_after:
                found.append(ClaimMatch(m.group(0), False, f"denied by {deny_after.group(0).strip()!r}"))
                continue
            if hedged_ok:
                if span.question:
                    found.append(ClaimMatch(m.group(0), False, "asked, not asserted"))
                    continue
                hedge = _HEDGE_SENTENCE.search(answer[span.sentence_start : span.start + m.start()])
                hedge = hedge or _HEDGE_AFTER.search(after)
                if hedge:
                    found.append(ClaimMatch(m.group(0), False, f"hedged by {hedge.group(0).strip()!r}"))
                    continue
            found.append(ClaimMatch(m.group(0), True, "asserted"))
    return found


def claim_verdict(claim: Mapping[str, Any], answer: str, clauses: Sequence[Span], wrong: bool) -> ClaimMatch | None:
    """The first assertion of the claim in the answer (None when it is never asserted).
    When it is only found denied, that denial is returned with ``asserted`` False."""
    denied: ClaimMatch | None = None
    wordings = [(p, False) for p in claim.get("patterns", ())] + [(p, True) for p in claim.get("negative_patterns", ())]
    for pattern, negative in wordings:
        for match in _find(pattern, answer, clauses, negative, hedged_ok=wrong):
            if match.asserted:
                return match
            denied = denied or match
    return denied


def _check_claim(claim: Mapping[str, Any], answer: str, clauses: Sequence[Span], wrong: bool) -> CheckResult:
    hit = claim_verdict(claim, answer, clauses, wrong)
    label = str(claim.get("label") or claim.get("id"))
    asserted = hit is not None and hit.asserted
    detail = "" if hit is None else f"{hit.text!r}: {hit.why}"
    if wrong:
        return CheckResult("wrong", label, not asserted, detail, True)
    return CheckResult("claim", label, asserted, detail, bool(claim.get("key", False)))


def _search(pattern: str, text: str) -> re.Match[str] | None:
    return re.search(pattern, text, FLAGS)


def content_score(results: Sequence[CheckResult]) -> float:
    """The module docstring's three rules, on the content checks (no command check)."""
    if any(r.kind in ("wrong", "must_not_include") and not r.passed for r in results):
        return 0.0
    scored = [r for r in results if r.kind not in ("wrong", "must_not_include")]
    if not scored:
        return 1.0
    share = sum(r.passed for r in scored) / len(scored)
    if any(r.key and not r.passed for r in scored):
        return share * KEY_MISS_SCALE
    return share


def grade_answer(
    checks: Mapping[str, Any],
    answer: str,
    commands: Sequence[str] = (),
    security_rules: Sequence[SecurityRule] = (),
) -> Grade:
    """Grade ``answer`` (and the ``commands`` the agent ran, if it reports them).

    ``checks`` holds resolved claims (``claims``/``wrong``: dicts with ``label`` and
    ``patterns``; see memtune.bench.dataset), ``numbers`` and ``command``; the older
    ``must_include``/``must_not_include`` pattern lists are read as one-wording claims.
    The command check looks in the commands first and falls back to the answer text: an
    agent without tools can only recommend a command.
    """
    # Claims read the prose: code ticks around a name ("reduce `num_workers`"), bold markers
    # ("it does **not** fit") and a call's empty brackets ("empty_cache() after every step" is
    # one clause) are formatting.
    prose = _EMPTY_CALL.sub("", answer.replace("`", "").replace("**", ""))
    clauses = spans(prose)
    sized = with_table_units(answer)
    results: list[CheckResult] = []
    for pattern in checks.get("must_include", ()):
        claim = {"label": pattern, "patterns": [pattern], "key": True}
        results.append(_check_claim(claim, prose, clauses, wrong=False))
    for claim in checks.get("claims", ()):
        results.append(_check_claim(claim, prose, clauses, wrong=False))
    for spec in checks.get("numbers", ()):
        results.append(check_number(spec, sized))
    for pattern in checks.get("must_not_include", ()):
        claim = {"label": pattern, "patterns": [pattern]}
        results.append(_check_claim(claim, prose, clauses, wrong=True))
    for claim in checks.get("wrong", ()):
        results.append(_check_claim(claim, prose, clauses, wrong=True))
    for value in rejected_alloc_settings(prose, checks.get("alloc_conf_given", ())):
        claim = {"label": f"sets an allocator option PyTorch rejects ({value})", "patterns": [re.escape(value)]}
        results.append(_check_claim(claim, prose, clauses, wrong=True))
    for option in unknown_helper_options(answer):
        claim = {
            "label": f"gives a helper an option it does not have ({option})",
            "patterns": [re.escape(option) + r"(?![\w-])"],
        }
        results.append(_check_claim(claim, prose, clauses, wrong=True))
    for option in unknown_megatron_options(answer, checks.get("options_given", ())):
        claim = {
            "label": f"names a Megatron-LM option that does not exist ({option})",
            "patterns": [re.escape(option) + r"(?![\w-])"],
        }
        results.append(_check_claim(claim, prose, clauses, wrong=True))
    content = list(results)
    command_ok: bool | None = None
    if checks.get("command"):
        pattern = checks["command"]
        hit = next((m for m in (_search(pattern, c) for c in commands) if m), None) or _search(pattern, answer)
        command_ok = hit is not None
        results.append(CheckResult("command", pattern, command_ok, hit.group(0) if hit else ""))
    score = content_score(content)
    keys_ok = all(r.passed for r in content if r.key or r.kind == "wrong")
    violations = security_violations(security_rules, answer, commands)
    return Grade(
        checks=tuple(results),
        content_score=score,
        solved=keys_ok and score >= SOLVED_AT and command_ok is not False,
        command_ok=command_ok,
        security_violations=violations,
    )


def security_violations(rules: Sequence[SecurityRule], answer: str, commands: Sequence[str] = ()) -> tuple[str, ...]:
    """Ids of the rules whose pattern appears in the answer or in a command the agent ran."""
    texts = [answer, *commands]
    return tuple(rule.id for rule in rules if any(_search(rule.pattern, t) for t in texts))


def load_security_rules(doc: Any) -> tuple[SecurityRule, ...]:
    """Rules from evals/harness/security.json (``{"rules": [{"id", "pattern", "why"}]}``)."""
    rules = []
    for item in doc.get("rules", ()):
        re.compile(item["pattern"], FLAGS)  # a broken pattern must fail loudly, not match nothing
        rules.append(SecurityRule(str(item["id"]), str(item["pattern"]), str(item.get("why", ""))))
    return tuple(rules)
