"""The claim grader: it must tell a right answer from a wrong one that uses the same words.

Three kinds of evidence, each a test:
- small cases of the rules themselves (denial, its scope, hedges, questions, numbers);
- every task's hand-written answers (tests/data/grader-answers/answers.yaml): each task has
  at least one right answer in other words than its ground truth (>= 0.8) and one wrong answer
  that echoes the right words (<= 0.25);
- a second set written afterwards in yet other words (other_words.yaml), never used to
  adjust a pattern before it was graded: the same two bars;
- six blind batches written by separate sessions that never saw the grader (blind_batch3.yaml
  to blind_batch8.yaml; how each was used is in its header): the same bars, with the answers the
  grader still misses listed in KNOWN_MISSES as strict xfails, and the "good" answers of a task
  whose ground truth was corrected after they were written held to the wrong-answer bar
  (RELABELLED).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memtune.bench.dataset import load_dataset
from memtune.bench.grading import KEY_MISS_SCALE, content_score, extract_percentages, grade_answer, spans

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


#: Blind answers (written without the grader, see the files' headers) that the grader still
#: scores against their label, and why. Each is an xfail that must keep failing (strict), so a
#: change that fixes one shows up and the list stays true.
ROUNDS = (
    'rounds the helper\'s figure to two digits ("about 56 GiB"); helper-number checks need three, '
    "or the number cannot tell a helper run from a guess"
)
_MISSES = (
    ("blind_batch4.yaml", "estimate-phi-4", "good", 1, ROUNDS),
    ("blind_batch4.yaml", "estimate-gemma-3-27b-it", "good", 1, ROUNDS),
    ("blind_batch4.yaml", "estimate-qwen2-5-7b-instruct", "good", 1, ROUNDS),
    ("blind_batch4.yaml", "estimate-llama-3-2-3b-instruct", "good", 1, ROUNDS),
    ("blind_batch4.yaml", "estimate-qwen3-30b-a3b", "good", 1, ROUNDS),
    ("blind_batch4.yaml", "estimate-llama-3-2-1b-instruct", "good", 1, ROUNDS),
    (
        "blind_batch4.yaml",
        "trace-leak-one-rank",
        "good",
        1,
        "gives the allocation trend (1.95 -> 2.93 GiB), not the key figure: rank 3's +1.12 GiB of peak allocated",
    ),
    (
        "blind_batch4.yaml",
        "read-outside-pytorch-nvidia-smi",
        "good",
        1,
        "writes the 57.1 GiB peak reserved without its unit, inside an expression (59.9 - 57.1)",
    ),
    (
        "blind_batch4.yaml",
        "neg-dataloader-host-oom",
        "good",
        1,
        "says to reduce num_workers x prefetch_factor only as 'reduce them' after a dash, which ends the clause",
    ),
    (
        "blind_batch5.yaml",
        "log-deepspeed-issue237",
        "good",
        1,
        "argues the case (reserve ~600x below the request) but never states the conclusion, capacity",
    ),
    (
        "blind_batch5.yaml",
        "trace-leak-one-rank",
        "good",
        1,
        "gives the allocation trend, not the key figure: rank 3's +1.12 GiB of peak allocated",
    ),
    ("blind_batch5.yaml", "neg-nsys-profile", "wrong", 1, "invents nsys options (--iterations, --profile-ranks)"),
    (
        "blind_batch5.yaml",
        "neg-mfu-overlap",
        "wrong",
        1,
        "invents overlap flags and misstates what tp_comm_overlap does",
    ),
    (
        "blind_batch5.yaml",
        "log-gpt4llm-a100",
        "wrong",
        1,
        "its own misreading of the log's figures, with the right fix",
    ),
    (
        "blind_batch5.yaml",
        "estimate-qwen3-32b",
        "wrong",
        1,
        "blames the distributed optimizer (turning it off would add memory)",
    ),
    (
        "blind_batch5.yaml",
        "estimate-llama-3-2-1b-instruct",
        "wrong",
        0,
        "quotes the right 28.07 GiB, then asserts other figures",
    ),
    (
        "blind_batch5.yaml",
        "estimate-llama-3-2-1b-instruct",
        "wrong",
        1,
        "quotes the right 28.07 GiB, then asserts other figures",
    ),
    (
        "blind_batch6.yaml",
        "log-verl-fsdp-logprob",
        "good",
        1,
        "FAQ style: the numbers and the fix, never the conclusion, capacity",
    ),
    (
        "blind_batch6.yaml",
        "nccl-ub-expandable",
        "wrong",
        1,
        "moves the conflict to the distributed optimizer: a wrong cause no check names",
    ),
    ("blind_batch6.yaml", "neg-nsys-profile", "wrong", 1, "invents an nsys option (--capture-steps)"),
    (
        "blind_batch6.yaml",
        "log-gpt4llm-a100",
        "wrong",
        1,
        "turns expandable segments off with garbage_collection_threshold, an allocator recipe no check names",
    ),
    (
        "blind_batch6.yaml",
        "estimate-llama-3-2-3b-instruct",
        "wrong",
        1,
        "swaps max allocated and reserved and says the distributed optimizer offloads to the CPU",
    ),
    ("blind_batch6.yaml", "neg-tokenizer-padding", "wrong", 1, "invents dataset keys and misstates the packing mask"),
    ("blind_batch6.yaml", "neg-slurm-container", "wrong", 1, "invents pyxis options (--container, --bind)"),
)
_MISSES += (
    (
        "blind_batch7.yaml",
        "recompute-selective-vs-mlp",
        "wrong",
        1,
        "the wrong ranking sits in an 'if you still need' sentence",
    ),
    (
        "blind_batch7.yaml",
        "plan-rank-options",
        "wrong",
        1,
        "misprices mlp recompute (6%); the 16% it should carry is on PP8",
    ),
    ("blind_batch7.yaml", "neg-nsys-profile", "wrong", 1, "invents nsys behaviour"),
    ("blind_batch7.yaml", "neg-checkpoint-conversion", "wrong", 1, "invents a conversion step"),
    ("blind_batch7.yaml", "neg-mfu-overlap", "wrong", 1, "misstates what the overlap flags do"),
    (
        "blind_batch7.yaml",
        "neg-vllm-gpu-memory-utilization",
        "wrong",
        1,
        "misstates what gpu_memory_utilization covers",
    ),
    (
        "blind_batch7.yaml",
        "neg-lr-schedule",
        "wrong",
        0,
        "recommends a schedule the ground truth argues against, in valid flags",
    ),
    (
        "blind_batch7.yaml",
        "neg-lr-schedule",
        "wrong",
        1,
        "recommends a schedule the ground truth argues against, in valid flags",
    ),
    ("blind_batch7.yaml", "neg-slurm-container", "wrong", 1, "invents container options"),
    (
        "blind_batch7.yaml",
        "log-nemo-rl-refit",
        "wrong",
        1,
        "disabling CUDA graphs instead of the allocator fix: no check names it",
    ),
    (
        "blind_batch7.yaml",
        "log-lmcache-private-pools",
        "wrong",
        1,
        "claims private pools make expandable segments ignored",
    ),
    (
        "blind_batch7.yaml",
        "estimate-llama-3-2-3b-instruct",
        "good",
        0,
        "'Yes, easily' and 'half the card spare' never say it fits",
    ),
)
_MISSES += (
    (
        "blind_batch8.yaml",
        "neg-checkpoint-conversion",
        "wrong",
        0,
        "drags memory fixes into a conversion question in words no check names",
    ),
    (
        "blind_batch8.yaml",
        "lora-regather-fallbacks",
        "wrong",
        1,
        "invents an EP fallback and says CUDA graphs/offloading keep re-gather on",
    ),
    (
        "blind_batch8.yaml",
        "lora-regather-small-gain",
        "wrong",
        1,
        "right figures, invented mechanism (re-gather on expert adapters) and advice (lower EP)",
    ),
    (
        "blind_batch8.yaml",
        "recompute-selective-vs-mlp",
        "wrong",
        1,
        "recommends TP8 as the better next step in words no raise-TP wording covers",
    ),
    ("blind_batch8.yaml", "vpp-myth", "wrong", 1, "invents a VPP rule (only VPP 5 legal) next to the right verdict"),
    (
        "blind_batch8.yaml",
        "cudagraph-nccl-register",
        "wrong",
        1,
        "says B200 needs NCCL_GRAPH_REGISTER=0 too, in a compute-capability argument",
    ),
    (
        "blind_batch8.yaml",
        "estimate-qwen3-8b-full-ft",
        "wrong",
        1,
        "says the distributed optimizer shards weights and gradients too",
    ),
    ("blind_batch8.yaml", "plan-rank-options", "wrong", 1, "misprices TP8 (-5.9%) and PP8 (-28.4%) in a ranked list"),
    (
        "blind_batch8.yaml",
        "alloc-conf-deprecation",
        "wrong",
        1,
        "invents a merge error and says Megatron reads only the old name",
    ),
    (
        "blind_batch8.yaml",
        "neg-nsys-profile",
        "wrong",
        1,
        "says Megatron runs Nsight itself and no nsys wrapper is needed",
    ),
    (
        "blind_batch8.yaml",
        "neg-checkpoint-conversion",
        "wrong",
        1,
        "swaps export_ckpt and import_ckpt",
    ),
    ("blind_batch8.yaml", "neg-nan-loss", "wrong", 1, "misstates bf16 vs fp16 range"),
    (
        "blind_batch8.yaml",
        "neg-mfu-overlap",
        "wrong",
        1,
        "says overlap_param_gather needs the distributed optimizer off",
    ),
    (
        "blind_batch8.yaml",
        "log-megatron-lm-v100",
        "wrong",
        1,
        "the myth (no expandable segments on V100) sits in a clause a denial covers",
    ),
    (
        "blind_batch8.yaml",
        "log-llamafactory-rank5",
        "wrong",
        1,
        "invents a loader fix (low_cpu_mem_usage=False) for a capacity OOM",
    ),
    (
        "blind_batch8.yaml",
        "log-framepack-huge-alloc",
        "wrong",
        1,
        "a bigger card instead of fixing the 30 GiB allocation's shape",
    ),
    (
        "blind_batch8.yaml",
        "estimate-meta-llama-3-1-8b",
        "wrong",
        1,
        "says expandable segments remove the device-view gap",
    ),
    (
        "blind_batch8.yaml",
        "estimate-gemma-3-27b-it",
        "wrong",
        1,
        "invents a sliding-window reason to raise the micro-batch",
    ),
    ("blind_batch8.yaml", "estimate-mixtral-8x7b-v0-1", "wrong", 1, "says full recompute alone makes it fit"),
    (
        "blind_batch8.yaml",
        "neg-vllm-gpu-memory-utilization",
        "wrong",
        1,
        "says gpu_memory_utilization covers the KV cache alone",
    ),
    (
        "blind_batch8.yaml",
        "neg-lr-schedule",
        "wrong",
        1,
        "recommends a schedule the ground truth argues against, in valid flags",
    ),
    (
        "blind_batch8.yaml",
        "neg-slurm-container",
        "wrong",
        1,
        "one task per node: says run_recipe.py spawns a process per GPU",
    ),
    (
        "blind_batch8.yaml",
        "log-chatglm3-finetune",
        "wrong",
        1,
        "right fix, then an invented margin to raise the batch size",
    ),
    ("blind_batch8.yaml", "log-fireredtts2", "wrong", 1, "invents a small-pool rule and picks max_split_size_mb"),
    (
        "blind_batch8.yaml",
        "estimate-qwen2-5-7b-instruct",
        "wrong",
        1,
        "advises dropping the distributed optimizer with a wrong cost",
    ),
    (
        "blind_batch8.yaml",
        "estimate-llama-3-2-3b-instruct",
        "wrong",
        1,
        "advises dropping the distributed optimizer with a wrong cost",
    ),
    (
        "blind_batch8.yaml",
        "log-meta-llama-v100",
        "wrong",
        1,
        "right fix, then an invented margin to raise the batch size",
    ),
    (
        "blind_batch8.yaml",
        "log-nemo-rl-refit",
        "wrong",
        1,
        "disabling CUDA graphs instead of the allocator fix: no check names it",
    ),
    (
        "blind_batch8.yaml",
        "estimate-llama-3-2-1b-instruct",
        "wrong",
        1,
        "advises dropping the distributed optimizer and says activations ignore the micro-batch",
    ),
    (
        "blind_batch8.yaml",
        "trace-ci-gate-longer-seq",
        "wrong",
        1,
        "says the helper always exits 0 (it exits 1 on a regression)",
    ),
    (
        "blind_batch8.yaml",
        "read-outside-pytorch-nvidia-smi",
        "wrong",
        1,
        "misreads the headroom as nearly full in words no check names",
    ),
    (
        "blind_batch8.yaml",
        "trace-noise-not-regression",
        "wrong",
        1,
        "invents a per-segment cost of expandable segments",
    ),
)
KNOWN_MISSES = {(b, t, k, i): why for b, t, k, i, why in _MISSES}
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
