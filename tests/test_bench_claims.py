"""The claim grader: it must tell a right answer from a wrong one that uses the same words.

Three kinds of evidence, each a test:
- small cases of the rules themselves (denial, its scope, hedges, questions, numbers);
- every task's hand-written answers (tests/data/grader-answers/answers.yaml): each task has
  at least one right answer in other words than its ground truth (>= 0.8) and one wrong answer
  that echoes the right words (<= 0.25);
- a second set written afterwards in yet other words (other_words.yaml), never used to
  adjust a pattern before it was graded: the same two bars;
- eight blind batches written by separate sessions that never saw the grader (blind_batch3.yaml
  to blind_batch10.yaml; how each was used is in its header): the same bars, with the answers the
  grader still misses listed in KNOWN_MISSES as strict xfails, and the "good" answers of a task
  whose ground truth was corrected after they were written held to the wrong-answer bar
  (RELABELLED).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memtune.bench.dataset import load_dataset
from memtune.bench.grading import KEY_MISS_SCALE, content_score, grade_answer, spans
from memtune.bench.numbers import extract_percentages

REPO = Path(__file__).resolve().parent.parent
DATASET = load_dataset(REPO / "evals" / "evals.json")
CASES = DATASET.by_id()
ANSWERS = REPO / "tests" / "data" / "grader-answers"

RAISE_TP = {"label": "raise TP", "patterns": [r"\b(?:raise|increase|bump)\s+(?:the\s+)?TP(?:\s*to\s*\d+)?"]}
FRAG = {"label": "fragmentation", "patterns": [r"fragment\w*"], "key": True}
CHECKS = {"claims": [FRAG], "wrong": [RAISE_TP]}


def score(answer: str, checks: dict = CHECKS) -> float:
    return grade_answer(checks, answer).content_score


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("Do not raise TP first; it is fragmentation.", 1.0),
        ("Don't bump TP. Fragmentation.", 1.0),
        ("Rather than raise TP, fix the fragmentation.", 1.0),
        ("Fragmentation. Raise TP only as a last resort.", 1.0),
        ("Fragmentation. Only if that fails, raise TP.", 1.0),
        ("Fragmentation. Should you raise TP? No.", 1.0),
        ("A common mistake is to raise TP first; this is fragmentation.", 1.0),
        ("Raise TP to 8. The OOM is fragmentation.", 0.0),
        ("This is fragmentation, so raise TP to 8.", 0.0),
        ("It's fragmentation: raise TP to 8.", 0.0),
        ("Don't panic; raise TP to 8. Fragmentation.", 0.0),  # the denial ends with its clause
    ],
)
def test_a_denied_or_deferred_wrong_claim_does_not_count(answer: str, expected: float) -> None:
    assert score(answer) == expected


@pytest.mark.parametrize(
    "answer",
    [
        "It's not fragmentation, it's capacity.",
        "Fragmentation is not the cause here.",
        "Fragmentation is unlikely given these numbers.",
        "We can rule out fragmentation.",
    ],
)
def test_a_denied_required_claim_is_not_made(answer: str) -> None:
    grade = grade_answer(CHECKS, answer)
    assert not grade.checks[0].passed and grade.content_score == 0.0


def test_a_missed_key_check_makes_the_answer_wrong() -> None:
    checks = {
        "claims": [FRAG, {"label": "fix", "patterns": ["expandable"]}],
        "numbers": [{"label": "req", "bytes": 180355072}],
    }
    assert score("Fragmentation; set expandable segments; 172 MiB requested.", checks) == 1.0
    missing_number = score("Fragmentation; set expandable segments.", checks)
    assert missing_number == pytest.approx(KEY_MISS_SCALE * 2 / 3)
    assert score("Expandable segments; 172 MiB.", checks) == pytest.approx(KEY_MISS_SCALE * 2 / 3)
    assert score("Fragmentation, 172 MiB.", checks) == pytest.approx(2 / 3)  # a non-key miss is partial credit
    assert content_score([]) == 1.0


def test_percentages_need_the_percent_sign() -> None:
    assert extract_percentages("TP8 cost -28.4%, PP8 5.9 percent, 16 pct; TP 8, 70B") == [28.4, 5.9, 16.0]
    checks = {"numbers": [{"label": "cost", "value": 28.4, "tolerance": 0.6, "unit": "%"}]}
    assert score("TP8 loses about 28%", checks) == 1.0
    assert score("TP 28 with 70B", checks) == 0.0


def test_clauses_split_at_sentences_and_connectives_not_inside_numbers() -> None:
    text = "Rank 13 asked for 2.84 GiB, but it is not capacity; see diagnose.py."
    parts = [text[s.start : s.end].strip() for s in spans(text)]
    assert parts == ["Rank 13 asked for 2.84 GiB", "it is not capacity", "see diagnose.py."]


def _answers(name: str) -> list[tuple[str, str, str]]:
    doc = yaml.safe_load((ANSWERS / name).read_text(encoding="utf-8"))
    return [(cid, kind, text) for cid, by_kind in doc.items() for kind in ("good", "wrong") for text in by_kind[kind]]


HAND = _answers("answers.yaml")
OTHER = _answers("other_words.yaml")


def test_every_task_has_a_right_paraphrase_and_a_wrong_echo() -> None:
    have = {(cid, kind) for cid, kind, _ in HAND}
    missing = [(c.id, kind) for c in DATASET.cases for kind in ("good", "wrong") if (c.id, kind) not in have]
    assert missing == []
    assert {cid for cid, _, _ in HAND} <= set(CASES)


def _check(cid: str, kind: str, text: str) -> None:
    grade = grade_answer(CASES[cid].checks, text)
    why = [(c.kind, c.label, c.passed, c.detail) for c in grade.checks if c.kind != "command"]
    if kind == "good":
        assert grade.content_score >= 0.8, why
    else:
        assert grade.content_score <= 0.25, why


@pytest.mark.parametrize("cid, kind, text", HAND, ids=[f"{c}-{k}-{i}" for i, (c, k, _) in enumerate(HAND)])
def test_hand_written_answers(cid: str, kind: str, text: str) -> None:
    _check(cid, kind, text)


@pytest.mark.parametrize("cid, kind, text", OTHER, ids=[f"{c}-{k}-{i}" for i, (c, k, _) in enumerate(OTHER)])
def test_answers_in_other_words(cid: str, kind: str, text: str) -> None:
    _check(cid, kind, text)


def _indexed(name: str) -> list[tuple[str, str, int, str]]:
    doc = yaml.safe_load((ANSWERS / name).read_text(encoding="utf-8"))
    return [
        (cid, kind, i, text)
        for cid, by_kind in doc.items()
        for kind in ("good", "wrong")
        for i, text in enumerate(by_kind[kind])
    ]


#: Blind answers the grader still scores against their label, and why
#: (tests/data/grader-answers/known_misses.yaml). Each is an xfail that must keep failing (strict),
#: so a change that fixes one shows up and the list stays true.
KNOWN_MISSES = {
    (batch, row["task"], row["kind"], row["index"]): row["why"]
    for batch, rows in yaml.safe_load((ANSWERS / "known_misses.yaml").read_text(encoding="utf-8")).items()
    for row in rows
}
#: Tasks whose ground truth was corrected after some batches were written: the answers those
#: batches call good follow the old truth, so they must now fail (batch, task) -> why.
RELABELLED = {
    (name, "log-deepspeed-issue3671"): "ground truth corrected on 2026-12-05: the cut-off reserved figure "
    "(27.8 of GiB) still leaves 4.1 GiB idle against a 2.72 GiB request, fragmentation, not capacity"
    for name in (
        "blind_batch3.yaml",
        "blind_batch4.yaml",
        "blind_batch5.yaml",
        "blind_batch6.yaml",
        "blind_batch7.yaml",
    )
}
BATCHES = (
    "blind_batch3.yaml",
    "blind_batch4.yaml",
    "blind_batch5.yaml",
    "blind_batch6.yaml",
    "blind_batch7.yaml",
    "blind_batch8.yaml",
    "blind_batch9.yaml",
    "blind_batch10.yaml",
    "blind_batch11.yaml",
    "blind_batch12.yaml",
    "blind_batch13.yaml",
    "blind_batch14.yaml",
    "blind_batch15.yaml",
    "blind_batch16.yaml",
    "blind_batch17.yaml",
    "blind_batch18.yaml",
    "blind_batch19.yaml",
)
BLIND = [(name, *row) for name in BATCHES for row in _indexed(name)]


@pytest.mark.parametrize(
    "name, cid, kind, index, text",
    [
        pytest.param(
            *row,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[row[:4]])] if row[:4] in KNOWN_MISSES else [],
        )
        for row in BLIND
    ],
    ids=[f"{n.split('.')[0]}-{c}-{k}-{i}" for n, c, k, i, _ in BLIND],
)
def test_blind_answers(name: str, cid: str, kind: str, index: int, text: str) -> None:
    _check(cid, "wrong" if (name, cid) in RELABELLED else kind, text)


def test_blind_batches_cover_every_task_and_the_known_misses_exist() -> None:
    for name in BATCHES:
        rows = [r for r in BLIND if r[0] == name]
        assert {r[1] for r in rows} == set(CASES)
        assert all(
            sum(1 for r in rows if r[1] == cid and r[2] == kind) == 2 for cid in CASES for kind in ("good", "wrong")
        )
    assert set(KNOWN_MISSES) <= {r[:4] for r in BLIND}
