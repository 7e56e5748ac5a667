"""benchmarks/local_judge.py without a model: the prompt, the reading of the first token's
log-probabilities, the AUC and the per-kind summary."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("local_judge", REPO / "benchmarks" / "local_judge.py")
assert _spec and _spec.loader
judge = importlib.util.module_from_spec(_spec)
sys.modules["local_judge"] = judge
_spec.loader.exec_module(judge)


def test_the_judge_sees_question_reference_and_candidate() -> None:
    from memtune.bench.dataset import load_dataset

    case = load_dataset(REPO / "evals" / "evals.json").by_id()["frag-first-fix"]
    messages = judge.judge_messages(case, "Raise TP to 8.")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert case.question in messages[1]["content"] and case.ground_truth in messages[1]["content"]
    assert messages[1]["content"].index(case.ground_truth) < messages[1]["content"].index("Raise TP to 8.")


def test_wrong_probability_reads_both_words_in_any_spelling() -> None:
    top = [
        {"token": "WR", "logprob": math.log(0.6)},
        {"token": " Right", "logprob": math.log(0.2)},
        {"token": "RIGHT", "logprob": math.log(0.1)},
        {"token": "The", "logprob": math.log(0.1)},
    ]
    assert abs(judge.wrong_probability(top) - 0.6 / 0.9) < 1e-9
    assert judge.wrong_probability([{"token": "The", "logprob": 0.0}]) is None
    assert judge.wrong_probability([{"token": " ", "logprob": 0.0}]) is None


def test_auc_is_the_chance_a_wrong_answer_scores_above_a_right_one() -> None:
    assert judge.auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert judge.auc([0.1], [0.9]) == 0.0
    assert judge.auc([0.5, 0.5], [0.5]) == 0.5  # a judge that says the same for all is a coin
    assert judge.auc([], [0.5]) is None


def test_summary_counts_grader_hits_per_kind_and_the_judges_auc() -> None:
    rows = [
        {"task": "t", "kind": "good", "index": 0, "p_wrong": 0.2, "grade": 1.0},
        {"task": "t", "kind": "good", "index": 1, "p_wrong": 0.4, "grade": 0.5},
        {"task": "t", "kind": "wrong", "index": 0, "p_wrong": 0.9, "grade": 0.0},
        {"task": "t", "kind": "wrong", "index": 1, "p_wrong": 0.3, "grade": 1.0},
    ]
    out = judge.summarise(rows)
    assert out["right"]["grader_right"] == 1 and out["right"]["judge_auc_vs_right"] is None
    assert out["wrong, first kind"] == {
        "answers": 1,
        "grader_right": 1,
        "judge_mean_p_wrong": 0.9,
        "judge_auc_vs_right": 1.0,
        "judge_unreadable": 0,
    }
    assert out["wrong, one hidden error"]["grader_right"] == 0
    assert out["wrong, one hidden error"]["judge_auc_vs_right"] == 0.5


def test_blind_answers_keep_only_tasks_of_the_dataset(tmp_path: Path) -> None:
    batch = tmp_path / "b.yaml"
    batch.write_text("a:\n  good: [x, y]\n  wrong: [z, w]\ngone:\n  good: [x, y]\n  wrong: [z, w]\n")
    rows = judge.blind_answers([batch], {"a"})
    assert rows == [("a", "good", 0, "x"), ("a", "good", 1, "y"), ("a", "wrong", 0, "z"), ("a", "wrong", 1, "w")]


def test_caught_at_the_threshold_that_keeps_every_right_answer() -> None:
    rows = [
        {"kind": "good", "index": 0, "p_wrong": 0.7, "grade": 1.0},
        {"kind": "good", "index": 1, "p_wrong": 0.9, "grade": 1.0},
        {"kind": "wrong", "index": 0, "p_wrong": 0.95, "grade": 0.0},
        {"kind": "wrong", "index": 1, "p_wrong": 0.92, "grade": 1.0},
        {"kind": "wrong", "index": 1, "p_wrong": 0.9, "grade": 1.0},  # a tie with a right answer passes
    ]
    assert judge.caught_keeping_every_right(rows) == {
        "wrong0": 1,
        "wrong0_also_missed_by_grader": 0,
        "wrong1": 1,
        "wrong1_also_missed_by_grader": 1,
    }


def test_a_batch_of_another_shape_is_one_line(tmp_path: Path) -> None:
    import pytest

    from memtune.errors import InputError

    batch = tmp_path / "b.yaml"
    batch.write_text("a:\n  good: [x]\n")
    with pytest.raises(InputError, match="expected a mapping task id"):
        judge.blind_answers([batch], {"a"})
