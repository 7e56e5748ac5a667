#!/usr/bin/env python3
"""Can the local Tier-3 model judge what the pattern grader misses? Both, side by side.

The claim grader catches wrong answers that contradict a task's verdict, key numbers or
classic mistakes, but rarely one that keeps all of those and hides a single false statement
(evals/README.md, blind batches). A model judge is the obvious other way, so this measures the
only one this project can run here: Qwen2.5-Coder-1.5B-Instruct (the Tier-3 agent's model,
optional extra) is shown the question, the task's ground truth as the reference and one blind
answer, and asked RIGHT or WRONG; its score is P(WRONG) from the first token's log-probabilities,
so no threshold has to be chosen to compare it (AUC: the chance that a wrong answer scores above
a right one; 0.5 is a coin).

Reads blind answer sets (tests/data/grader-answers/blind_batch*.yaml: per task 2 right answers,
a first wrong answer with the opposite verdict or a wrong key number, a second one with one
hidden error). Prints, per answer kind, the judge's mean P(WRONG) and its AUC against the right
answers, beside the pattern grader's catch rate on the same answers. Progress on stderr.

usage: python3 benchmarks/local_judge.py [--batch FILE ...] [--tasks N] [--json]
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from memtune.bench.dataset import Case, load_dataset  # noqa: E402
from memtune.bench.grading import grade_answer  # noqa: E402
from memtune.errors import InputError  # noqa: E402

DEFAULT_BATCH = REPO / "tests" / "data" / "grader-answers" / "blind_batch19.yaml"
#: answer kinds: right answers, first wrong answers, second wrong answers (one hidden error)
KINDS = (("good", None), ("wrong", 0), ("wrong", 1))

SYSTEM = (
    "You grade answers about GPU memory in NVIDIA Megatron training. You get a user's question, a "
    "reference answer that is correct, and a candidate answer. The candidate is WRONG if any "
    "statement in it is false or contradicts the reference - a wrong fix, cost, mechanism, flag, "
    "setting, order of steps or number - even when its main verdict agrees. Otherwise it is RIGHT. "
    "Reply with one word: RIGHT or WRONG."
)


def judge_messages(case: Case, answer: str) -> list[dict[str, str]]:
    """The chat the judge sees: the instruction, then question, reference and candidate."""
    user = (
        f"Question:\n{case.question}\n\nReference answer:\n{case.ground_truth}\n\n"
        f"Candidate answer:\n{answer}\n\nVerdict (RIGHT or WRONG):"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def wrong_probability(top_logprobs: Sequence[Mapping[str, Any]]) -> float | None:
    """P(WRONG) / (P(WRONG) + P(RIGHT)) over the first token's alternatives (" WR", "Wrong",
    "RIGHT" ...); None when neither word is among them."""
    wrong = right = 0.0
    for item in top_logprobs:
        token = str(item["token"]).strip().upper()
        if not token:
            continue
        if "WRONG".startswith(token) or token.startswith("WRONG"):
            wrong += math.exp(float(item["logprob"]))
        elif "RIGHT".startswith(token) or token.startswith("RIGHT"):
            right += math.exp(float(item["logprob"]))
    return None if wrong + right == 0 else wrong / (wrong + right)


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """Chance that a random positive scores above a random negative (ties count half)."""
    if not positives or not negatives:
        return None
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def blind_answers(paths: Sequence[Path], case_ids: set[str]) -> list[tuple[str, str, int, str]]:
    """(task, kind, index, text) of every answer in the batches, for the tasks still in the dataset."""
    import yaml

    rows = []
    for path in paths:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("good"), list) and isinstance(v.get("wrong"), list)
            for v in doc.values()
        ):
            raise InputError(f"{path}: expected a mapping task id -> {{good: [...], wrong: [...]}}")
        for cid, by_kind in doc.items():
            if cid in case_ids:
                rows += [(cid, kind, i, text) for kind in ("good", "wrong") for i, text in enumerate(by_kind[kind])]
    return rows


def caught_keeping_every_right(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Wrong answers the judge would fail at the one threshold that still passes every right
    answer (strictly above the highest P(WRONG) any right answer got): the Tier-3 bar asks that
    every right answer pass, so this is what the judge could add to the grader under it."""
    good = [r["p_wrong"] for r in rows if r["kind"] == "good" and r["p_wrong"] is not None]
    ceiling = max(good, default=1.0)
    out = {}
    for index in (0, 1):
        mine = [r for r in rows if r["kind"] == "wrong" and r["index"] == index]
        out[f"wrong{index}"] = sum(1 for r in mine if r["p_wrong"] is not None and r["p_wrong"] > ceiling)
        out[f"wrong{index}_also_missed_by_grader"] = sum(
            1 for r in mine if r["p_wrong"] is not None and r["p_wrong"] > ceiling and r["grade"] > 0.25
        )
    return out


def summarise(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per answer kind: how many, the grader's catch rate (right kinds: its pass rate) and the
    judge's mean P(WRONG) and AUC against the right answers."""
    good = [r["p_wrong"] for r in rows if r["kind"] == "good" and r["p_wrong"] is not None]
    out: dict[str, Any] = {}
    for kind, index in KINDS:
        mine = [r for r in rows if r["kind"] == kind and (index is None or r["index"] == index)]
        scores = [r["p_wrong"] for r in mine if r["p_wrong"] is not None]
        name = "right" if kind == "good" else ("wrong, first kind" if index == 0 else "wrong, one hidden error")
        grader_ok = sum(1 for r in mine if (r["grade"] >= 0.8 if kind == "good" else r["grade"] <= 0.25))
        out[name] = {
            "answers": len(mine),
            "grader_right": grader_ok,
            "judge_mean_p_wrong": round(sum(scores) / len(scores), 4) if scores else None,
            "judge_auc_vs_right": None if kind == "good" else auc(scores, good),
            "judge_unreadable": len(mine) - len(scores),
        }
    return out


@click.command(help=(__doc__ or "").splitlines()[0])
@click.option(
    "--batch",
    "batches",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="blind answer set (repeatable; default: tests/data/grader-answers/blind_batch19.yaml)",
)
@click.option("--tasks", type=click.IntRange(min=1), default=None, help="only the first N tasks (default: all)")
@click.option("--threads", type=click.IntRange(min=1), default=2, show_default=True, help="llama.cpp threads")
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")
def command(batches: tuple[Path, ...], tasks: int | None, threads: int, as_json: bool) -> int:
    from memtune.bench.llama_chat import load_llama
    from memtune.bench.model_store import ModelError, provide

    dataset = load_dataset(REPO / "evals" / "evals.json")
    cases = dataset.by_id()
    ids = [c.id for c in dataset.cases][:tasks] if tasks else [c.id for c in dataset.cases]
    answers = blind_answers(batches or (DEFAULT_BATCH,), set(ids))
    try:
        model_path = provide()
        llm = load_llama(model_path, n_ctx=4096, threads=threads, logits_all=True)
    except (ImportError, ModelError) as exc:
        raise InputError(f"no local model ({exc}); install the Tier-3 extra (evals/README.md) first") from None
    rows = []
    started = time.monotonic()
    for n, (cid, kind, index, text) in enumerate(answers, start=1):
        reply = llm.create_chat_completion(
            messages=judge_messages(cases[cid], text), max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=20
        )
        top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        grade = grade_answer(cases[cid].checks, text).content_score
        rows.append({"task": cid, "kind": kind, "index": index, "p_wrong": wrong_probability(top), "grade": grade})
        click.echo(f"[{n}/{len(answers)}] {time.monotonic() - started:.0f}s {cid} {kind}{index}", err=True)
    summary = summarise(rows)
    if as_json:
        doc = {
            "model": model_path.name,
            "answers": len(rows),
            "by_kind": summary,
            "caught_keeping_every_right": caught_keeping_every_right(rows),
            "rows": rows,
        }
        click.echo(json.dumps(doc, indent=2))
        return 0
    click.echo(f"judge: {model_path.name}; {len(rows)} blind answers")
    click.echo(f"{'answers':26} {'n':>4} {'grader right':>13} {'judge P(WRONG)':>15} {'judge AUC':>10}")
    for name, row in summary.items():
        auc_text = "-" if row["judge_auc_vs_right"] is None else f"{row['judge_auc_vs_right']:.3f}"
        mean = "-" if row["judge_mean_p_wrong"] is None else f"{row['judge_mean_p_wrong']:.3f}"
        click.echo(f"{name:26} {row['answers']:>4} {row['grader_right']:>13} {mean:>15} {auc_text:>10}")
    kept = caught_keeping_every_right(rows)
    click.echo(
        f"with every right answer passing, the judge fails {kept['wrong0']} first-kind and {kept['wrong1']} "
        f"hidden-error wrong answers ({kept['wrong1_also_missed_by_grader']} of them missed by the grader)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run :data:`command` under the helpers' runner: one-line usage errors, exit 2."""
    from memtune.cli import invoke

    return invoke(command, "local_judge.py", argv)


if __name__ == "__main__":
    from memtune.cli import run

    run(main, "local_judge.py")
