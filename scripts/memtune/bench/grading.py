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

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from memtune.bench.inventions import (
    rejected_alloc_settings,
    unknown_environment_variables,
    unknown_helper_options,
    unknown_megatron_options,
    unknown_pyxis_options,
)
from memtune.bench.numbers import (
    extract_numbers,
    extract_percentages,
    number_matches,
    pair_sizes,
    size_matches,
    with_table_units,
)

FLAGS = re.IGNORECASE | re.MULTILINE

KEY_MISS_SCALE = 0.1  # an answer that misses a key point keeps a tenth of its partial credit
SOLVED_AT = 0.8  # and a solved one at least this


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
# Numbers (extraction lives in memtune.bench.numbers)


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


#: How far after a subject (in characters) a figure counts as that subject's, where one clause
#: names several subjects.
FIGURE_REACH = 24


def _gives_figure(figure: Mapping[str, Any], text: str) -> bool:
    values = extract_percentages(text) if figure.get("unit") == "%" else extract_numbers(text)
    return number_matches({"value": figure["value"], "tolerance": figure.get("tolerance", 0.0)}, values) is not None


def swapped_figures(figures: Sequence[Mapping[str, Any]], answer: str, clauses: Sequence[Span]) -> list[str]:
    """Clauses that name one subject of ``figures`` and give only another subject's figure
    ("TP8 costs 5.9%" where TP8 measured -28.4% and PP8 -5.9%), each described once.

    Why: a wrong answer can carry every right number and still swap two of them, which turns
    the advice around; the numbers checks alone see all the figures present. A clause naming
    two subjects ("TP8 (-28.4%) against PP8 (-5.9%)") compares them and is left alone."""
    out: list[str] = []

    def swapped(own: Mapping[str, Any], text: str) -> None:
        if _gives_figure(own, text):
            return
        for other in figures:
            if other is not own and _gives_figure(other, text):
                why = f"gives {other['value']}{other.get('unit', '')} (measured for {other['subject']}) to {own['subject']}"
                if why not in out:
                    out.append(why)

    for span in clauses:
        part = answer[span.start : span.end]
        named = [f for f in figures if re.search(str(f["subject"]), part, FLAGS)]
        if len(named) == 1 and not span.question:
            swapped(named[0], part)
    # and in each sentence, a figure written right after a subject is that subject's ("TP8
    # (-5.9%: ...) and PP8 with DP1 (-28.4%)"); a list of subjects and then figures is not read
    for span in whole_sentences(clauses) if figures else ():
        part = answer[span.start : span.end]
        if span.question:
            continue
        mentions = sorted(
            (
                (m.start(), m.end(), i)
                for i, f in enumerate(figures)
                for m in re.finditer(str(f["subject"]), part, FLAGS)
            ),
        )
        for k, (_, end, i) in enumerate(mentions):
            stop = mentions[k + 1][0] if k + 1 < len(mentions) else len(part)
            swapped(figures[i], part[end : min(stop, end + FIGURE_REACH)])
    return out


# ---------------------------------------------------------------------------------------
# Claims: where a wording is asserted, and where it is denied


@dataclass(frozen=True)
class Span:
    """A stretch of the answer that asserts or denies things as one unit."""

    start: int
    end: int
    sentence_start: int
    question: bool  # the sentence ends in "?": it asks, it does not assert


# Sentences end at . ! ? followed by a space, not after "e.g." or "i.e." (so "2.84", "diagnose.py" and
# "expandable_segments:True" stay whole), at blank lines, before a list item, heading or table
# row, and at line breaks, except one inside wrapped prose (a word or comma, then a lower-case
# word on the next line).
_SENTENCE_END = re.compile(
    r"(?<=[.!?])(?<!e\.g\.)(?<!i\.e\.)[\"')\]*_]*\s+|\n\s*\n\s*|\n\s*(?=[-*+]\s|\d+[.)]\s|#|\|)|\|\s*\n"
    r"|(?<![A-Za-z,])\n\s*|\n\s*(?=[^a-z(`\s])"  # a line break inside wrapped prose joins two lines
)
# Clauses: a negation reaches to the end of its clause, not beyond. "It is not capacity,
# it is fragmentation" denies capacity only; "do not panic; raise TP" denies nothing. A comma
# before a number does not end a clause ("legal sizes are 2, 4, 5, 10" is one list), and a
# short label's colon does not either ("Ranks 0-2: unchanged", "Diagnosis: capacity"; see
# spans), unless the label itself denies ("Not capacity: fragmentation").
# A bracket ends a clause even after a name: a call's arguments are a clause of their own, so a
# wording must not end in "(" ("pickle.load", not "pickle.load("). A colon after a space is a
# character the answer names ("`=` instead of `:`"), not the end of a label.
_CLAUSE_BREAK = re.compile(
    r"[;()\[\]]|,(?!\s*\d)|(?<!\s):[*_]*\s(?!\s*[`'\"]?(?:true|false|\d)\b)|\s[—–-]{1,2}\s|—"
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
    r"unlike|beware\s+of|misspell\w*|typos?)\b|\w+n[’']t\b",
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
    # a name or a step said to do nothing: "NCCL_TIMEOUT does not exist", "... has no effect"
    r"|(?:has|have|had)\s+no\s+effect|(?:is|are)\s+(?:silently\s+)?ignored|(?:does|do|changes?|achieves?)\s+nothing"
    r"|(?:does\s*n[o’']?t|doesn[’']t|does\s+not|do\s+not|don[’']t)\s+(?:exist|take\s+effect|do\s+anything)"
    r"|(?:(?:nothing|nobody)\s+(?:ever\s+)?|(?:PyTorch|NCCL|it)\s+never\s+)reads?\b"
    r"|(?:is|are|'s)\s+(?:a\s+)?(?:common\s+)?(?:typo|misspelling)"
    r")",
    re.IGNORECASE,
)
#: For a wrong claim only, more verbs of effect deny it: "PYTORCH_NO_CUDA_MEMORY_CACHING=1 does not
#: lower the peak". A required claim keeps its words ("expandable segments will not lower the
#: allocated peak but remove the idle reserve" still recommends them).
_DENY_AFTER_EFFECT = re.compile(
    r"^\W*(?:\w+\W+){0,6}?(?:(?:would|will|does|do|did|should|can|could)\s*(?:not|n[’']t)|won[’']t|wouldn[’']t|"
    r"doesn[’']t|don[’']t|didn[’']t|shouldn[’']t|can[’']t|cannot)\s+(?:lower|shrink|free|prevent|stop|remove)\b",
    re.IGNORECASE,
)
_AFTER_STOP = re.compile(r"\b(?:and|that|which|while|whereas|who|where|when|whose)\b", re.IGNORECASE)

# For a wrong claim only: a recommendation kept for later is not the recommendation
# ("only if that is not enough, raise TP", "raise TP as a last resort").
_HEDGE_SENTENCE = re.compile(
    r"\b(?:if|unless|whether|only\s+(?:(?:helps?|works?|matters?|applies)\s+)?(?:if|when|after|as|then|once)|"
    r"last\s+resort|fallback|later|eventually|"
    r"afterwards|after\s+that|(?:only\s+)?at\s+the\s+(?:very\s+)?end)\b",
    re.IGNORECASE,
)
_HEDGE_AFTER = re.compile(
    r"^[^.;!?]{0,40}?\b(?:if\s+(?:needed|necessary|required|(?:it|that|this|you)\b)|if(?=\s*$)|only\s+if|as\s+a\s+"
    r"(?:last\s+resort|fallback)|last\s+resort|later|afterwards|(?:only\s+)?at\s+the\s+(?:very\s+)?end|"
    r"last(?!\s+(?:step|layer|stage|rank|iteration)))\b",
    re.IGNORECASE,
)


#: Text ending inside a conditional clause ("If you open the snapshot with "): a wording that
#: follows belongs to the condition, a case the answer describes, not a step it recommends.
_INSIDE_CONDITION = re.compile(r"\b(?:if|when|whenever|once|unless)\b[^,;:.!?]*$", re.IGNORECASE)

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
    start: int = -1  # where the wording starts in the answer


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


def _find(
    pattern: str, answer: str, clauses: Sequence[Span], negative: bool, hedged_ok: bool, hedge_rescues: bool = True
) -> list[ClaimMatch]:
    """Each place ``pattern`` matches inside one clause, with its polarity.

    ``negative``: the wording itself carries a negation ("no layout change"), so its own
    "no" does not deny it. ``hedged_ok``: a hedge ("if needed", "as a last resort") leaves
    the claim unasserted — used for wrong claims, which are recommendations. ``hedge_rescues``
    False: a hedge does not (an invented name is wrong even as a conditional step: "if you want to
    keep both, export NCCL_UB_EXPANDABLE_COMPAT=1"), only a denial, a question, or the wording
    standing inside the condition itself ("if you open it with pickle.load, code runs")."""
    found = []
    for span in clauses:
        if hedged_ok and pattern.startswith("^") and answer[: span.start].rstrip().endswith(","):
            continue  # a wrong claim's clause-initial "yes" or "right" after a comma is an aside, not a verdict
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
            deny_after = _DENY_AFTER.search(after) or (_DENY_AFTER_EFFECT.search(after) if hedged_ok else None)
            if deny_after:
                found.append(ClaimMatch(m.group(0), False, f"denied by {deny_after.group(0).strip()!r}"))
                continue
            if hedged_ok:
                if span.question:
                    found.append(ClaimMatch(m.group(0), False, "asked, not asserted"))
                    continue
                before = answer[span.sentence_start : span.start + m.start()]
                hedge = _HEDGE_SENTENCE.search(before)
                hedge = hedge or _HEDGE_AFTER.search(after)
                if hedge and hedge_rescues:
                    found.append(ClaimMatch(m.group(0), False, f"hedged by {hedge.group(0).strip()!r}"))
                    continue
                condition = None if hedge_rescues else _INSIDE_CONDITION.search(before)
                if condition:
                    found.append(ClaimMatch(m.group(0), False, f"inside the condition {condition.group(0).strip()!r}"))
                    continue
            found.append(ClaimMatch(m.group(0), True, "asserted", span.start + m.start()))
    return found


def whole_sentences(clauses: Sequence[Span]) -> list[Span]:
    """The clauses joined back into their sentences (one span per sentence)."""
    joined: dict[int, Span] = {}
    for span in clauses:
        first = joined.get(span.sentence_start)
        joined[span.sentence_start] = (
            span if first is None else Span(first.start, max(first.end, span.end), first.sentence_start, first.question)
        )
    return list(joined.values())


def claim_verdict(claim: Mapping[str, Any], answer: str, clauses: Sequence[Span], wrong: bool) -> ClaimMatch | None:
    """The first assertion of the claim in the answer (None when it is never asserted).
    When it is only found denied, that denial is returned with ``asserted`` False. A claim with
    ``hedge`` False (invented names, myths) is not spared by a hedge (see ``_find``).

    A claim with ``scope: sentence`` is matched across a whole sentence: a comparison such as
    "the more virtual stages, the lower the peak" is one statement split by its comma."""
    contexts = bool(claim.get("unless") or claim.get("only_if"))
    sentences = whole_sentences(clauses) if contexts or claim.get("scope") == "sentence" else []
    if claim.get("scope") == "sentence":
        clauses = sentences
    denied: ClaimMatch | None = None
    wordings = [(p, False) for p in claim.get("patterns", ())] + [(p, True) for p in claim.get("negative_patterns", ())]
    for pattern, negative in wordings:
        for match in _find(pattern, answer, clauses, negative, hedged_ok=wrong, hedge_rescues=claim.get("hedge", True)):
            if match.asserted:
                exempt = _context(claim.get("unless", ()), answer, sentences, match.start) if contexts else None
                needed = claim.get("only_if", ())
                if exempt is None and (not needed or _context(needed, answer, sentences, match.start)):
                    return match
                why = f"in the context {exempt!r}" if exempt else "without the context the claim needs"
                match = ClaimMatch(match.text, False, why, match.start)
            denied = denied or match
    return denied


def _context(wordings: Sequence[str], answer: str, sentences: Sequence[Span], start: int) -> str | None:
    """The first of ``wordings`` found in the sentence that holds ``start``. A claim's ``unless``
    names contexts in which its words say something true ("call empty_cache() before NCCL
    initialises" frees cached blocks that NCCL, outside PyTorch's allocator, can then take);
    its ``only_if`` the context that makes them the claim (a call offered against an OOM)."""
    for sentence in sentences:
        if sentence.start <= start < sentence.end:
            text = answer[sentence.start : sentence.end]
            for pattern in wordings:
                hit = re.search(pattern, text, FLAGS)
                if hit:
                    return hit.group(0)
    return None


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
    for swap in swapped_figures(checks.get("figures", ()), prose, clauses):
        results.append(CheckResult("wrong", "a figure given to the wrong option", False, swap, True))
    for value in rejected_settings_set(answer, prose, clauses, checks.get("alloc_conf_given", ())):
        claim = {
            "label": f"sets an allocator option PyTorch rejects ({value})",
            # case matters: "expandable_segments:true" is rejected, "...:True" is the fix
            "patterns": [f"(?-i:{re.escape(value)})"],
            # matched over its sentence: a setting written with ";" between options
            # ("expandable_segments:True;garbage_collection_threshold:0.8") spans two clauses
            "scope": "sentence",
            # wrong as a conditional step too ("if you add options later, write ...")
            "hedge": False,
        }
        results.append(_check_claim(claim, prose, clauses, wrong=True))
    invented = (
        ("gives a helper an option it does not have", unknown_helper_options(answer)),
        (
            "names a Megatron-LM option that does not exist",
            unknown_megatron_options(answer, checks.get("options_given", ())),
        ),
        ("names a pyxis option that does not exist", unknown_pyxis_options(answer)),
        (
            "names an environment variable that nothing reads",
            unknown_environment_variables(answer, checks.get("env_given", ())),
        ),
    )
    for what, options in invented:
        for option in options:
            pattern = rf"(?<![\w-]){re.escape(option)}(?![\w-])"
            claim = {"label": f"{what} ({option})", "patterns": [pattern], "hedge": False}
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


#: Words that show a setting is quoted as the failure, not recommended, when they stand in the
#: setting's own clause: "`expandable_segments:true` fails at start-up", "... is rejected",
#: "... raises a RuntimeError", "change `...:true` to `...:True`".
_QUOTED_AS_FAILING = re.compile(
    r"\b(?:fail\w*|reject\w*|refus\w*|invalid|wrong|crash\w*|unrecogni[sz]ed|typos?|broken|rais(?:es|ed|ing)|"
    r"throws?|errors?|stops?\s+the\s+run|instead\s+of|rather\s+than|change\w*|replac\w*|not|never)\b|n[’']t\b",
    re.IGNORECASE,
)


def rejected_settings_set(answer: str, prose: str, clauses: Sequence[Span], given: Sequence[str]) -> list[str]:
    """Allocator strings PyTorch rejects that the answer gives as a setting, not as the failure it
    explains: a string whose every mention shares its clause with "fails", "is rejected", "raises",
    "change ... to" or a denial is the user's mistake described, not advice.

    The raw answer is searched as well as the prose: a setting given alone in a code span
    (`` `expandable_segments:True;garbage_collection_threshold:0.8` ``) is found by its ticks."""
    out = []
    for value in dict.fromkeys([*rejected_alloc_settings(prose, given), *rejected_alloc_settings(answer, given)]):
        contexts = []
        for found in re.finditer(re.escape(value), prose):
            first = [c for c in clauses if c.start <= found.start() < max(c.end, c.start + 1)]
            last = [c for c in clauses if c.start < found.end() <= c.end]
            start = first[0].start if first else found.start()
            end = last[-1].end if last else found.end()
            contexts.append(prose[start:end])
        if contexts and all(_QUOTED_AS_FAILING.search(text.replace(value, " ")) for text in contexts):
            continue
        out.append(value)
    return out


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
