"""Every grader pattern stays linear on adversarial answers.

Why: a claim pattern with a nested, ambiguous repeat (a number list with optional separators)
took minutes on one stored 300-character answer that listed fifty numbers, and froze the
report. The shapes below are the ones that make a backtracking engine explode on the grader's
wordings: long lists of numbers with and without separators, one word or one figure repeated,
labels and brackets repeated. Each answer is graded against every task's checks (the shared
claims included); a linear pattern takes milliseconds, an exponential one minutes, so the bound
is generous on a loaded machine and still far below what a bad pattern needs.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memtune.bench.dataset import load_dataset
from memtune.bench.grading import grade_answer

DATASET = load_dataset(Path(__file__).resolve().parent.parent / "evals" / "evals.json")
ANSWER_CHARS = 8 << 10
SECONDS_PER_GRADE = 1.0


def _fill(unit: str) -> str:
    return (unit * (ANSWER_CHARS // len(unit) + 1))[:ANSWER_CHARS]


SHAPES = {
    "number list": _fill("3, 6, 9, 12, 15, "),
    "numbers without separators": _fill("3 6 9 12 15 "),
    "digits": _fill("1234567890"),
    "one word": _fill("memory "),
    "figures in brackets": _fill("TP8 (~6%), "),
    "labels": _fill("- Rank 3: 2.84 GiB\n"),
    "sizes": _fill("4.69 -> 7.58 GiB "),
    "VPP": _fill("VPP 10 "),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_task_grades_an_adversarial_answer_quickly(shape: str) -> None:
    answer = SHAPES[shape]
    slow = []
    for case in DATASET.cases:
        start = time.perf_counter()
        grade_answer(case.checks, answer)
        took = time.perf_counter() - start
        if took > SECONDS_PER_GRADE:
            slow.append((case.id, round(took, 2)))
    assert slow == []
