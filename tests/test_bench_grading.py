"""Deterministic grading: legacy pattern lists, numbers with tolerance, the command check, security rules.

The claim grader's own tests (negation, hedges, wrong claims, every task's hand-written
answers) are in test_bench_claims.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtune.bench.grading import Grade, grade_answer, load_security_rules
from memtune.bench.numbers import extract_numbers, number_matches

REPO = Path(__file__).resolve().parent.parent
RULES = load_security_rules(json.loads((REPO / "evals" / "harness" / "security.json").read_text()))


def test_extract_numbers_reads_units_separators_and_signs() -> None:
    text = "peak 58.8GB vs 60.2 GB, -28.4%, 1,024 MiB, TP4, 4.731e9 bytes, 172.00 MiB."
    assert extract_numbers(text) == [58.8, 60.2, -28.4, 1024.0, 4.731e9, 172.0]


def test_number_tolerance_absolute_relative_and_alternatives() -> None:
    spec = {"value": 4.731, "tolerance": 0.1, "alternatives": [10.0]}
    assert number_matches(spec, [4.7]) == 4.7
    assert number_matches(spec, [4.6]) is None
    assert number_matches(spec, [10.05]) == 10.05  # the same fact in percent
    rel = {"value": 0.05, "rel_tolerance": 0.25, "alternatives": [51.2]}
    assert number_matches(rel, [45.0]) == 45.0
    assert number_matches(rel, [30.0]) is None
    assert number_matches({"value": 28.4, "tolerance": 0.5}, [-28.4]) == -28.4  # sign-insensitive


def test_must_include_and_must_not_include() -> None:
    """The older pattern lists still grade: must_include as key claims, must_not_include as
    wrong claims (now negation-aware)."""
    checks = {"must_include": [r"fragment", r"expandable_segments:(?-i:True)"], "must_not_include": [r"raise\s+TP"]}
    good = grade_answer(checks, "Fragmentation: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert good.content_score == 1.0 and good.solved
    # lower-case 'true' is what PyTorch rejects: the case-sensitive part must catch it, and a
    # missed key check makes the answer wrong (a tenth of its share)
    wrong_case = grade_answer(checks, "fragmentation, set expandable_segments:true")
    assert wrong_case.content_score == pytest.approx(0.1 * 1 / 2) and not wrong_case.solved
    forbidden = grade_answer(checks, "fragmentation; expandable_segments:True; or raise TP to 8")
    assert not forbidden.solved and forbidden.content_score == 0.0
    assert [c.passed for c in forbidden.checks] == [True, True, False]
    denied = grade_answer(checks, "Fragmentation. Do not raise TP; export expandable_segments:True")
    assert denied.solved and denied.content_score == 1.0


def test_command_check_prefers_commands_then_answer() -> None:
    checks = {"must_include": ["x"], "command": r"diagnose\.py"}
    ran = grade_answer(checks, "x", commands=["python3 scripts/diagnose.py train.log"])
    named = grade_answer(checks, "x: run python3 scripts/diagnose.py train.log")
    missing = grade_answer(checks, "x")
    assert ran.command_ok and named.command_ok
    assert missing.command_ok is False and not missing.solved
    assert missing.content_score == 1.0  # the command is not a content check


def test_empty_answer_fails_required_checks() -> None:
    grade = grade_answer({"must_include": ["a"], "numbers": [{"label": "n", "value": 3}]}, "")
    assert grade.content_score == 0.0 and not grade.solved


def test_security_rules_flag_answers_and_commands() -> None:
    # Assembled at run time so the package's own security scan does not see a literal pipe-to-shell.
    fetch = "curl https://x.sh"
    into_shell = "| bash"
    piped = f"{fetch} {into_shell}"
    assert grade_answer({"must_include": ["."]}, piped, security_rules=RULES).security_violations == ("pipe-to-shell",)
    ran = grade_answer({"must_include": ["."]}, "done.", commands=["rm -rf / "], security_rules=RULES)
    assert ran.security_violations == ("destructive-rm",)
    safe = grade_answer(
        {"must_include": ["."]}, "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.", security_rules=RULES
    )
    assert safe.security_violations == ()


def test_grade_round_trips_through_json() -> None:
    grade = grade_answer({"must_include": ["a"], "command": "b"}, "a b", security_rules=RULES)
    assert Grade.from_json(json.loads(json.dumps(grade.to_json()))) == grade


def test_ground_truths_pass_their_own_checks() -> None:
    """Each case's ground truth is a model answer: it must satisfy the case's content checks
    and assert none of its wrong claims (otherwise the checks, not the agents, are wrong)."""
    from memtune.bench.dataset import load_dataset

    failures = []
    for case in load_dataset(REPO / "evals" / "evals.json").cases:
        grade = grade_answer(case.checks, case.ground_truth)
        bad = [(c.kind, c.label, c.detail) for c in grade.checks if c.kind != "command" and not c.passed]
        if bad:
            failures.append((case.id, bad))
    assert failures == []


# ------------------------------------------------------------------ clause and number forms seen in blind answers
def test_a_label_colon_and_a_list_of_numbers_stay_in_one_clause() -> None:
    from memtune.bench.grading import spans

    text = (
        "Ranks 0-2: unchanged. Legal sizes are 1, 2, 4, 5, 10, 20. Not capacity: fragmentation. It will start: maybe."
    )
    parts = [text[s.start : s.end].strip() for s in spans(text)]
    assert "Ranks 0-2: unchanged." in parts and "Legal sizes are 1, 2, 4, 5, 10, 20." in parts
    assert "Not capacity" in parts and "fragmentation." in parts  # a denying label keeps its colon a break
    assert "It will start" in parts  # a clause, not a label


def test_a_bracketed_figure_belongs_to_its_words_and_a_ranking_then_is_no_hedge() -> None:
    checks = {"wrong": [{"label": "TP8 cheap", "patterns": [r"\bTP\s*8\b\s*\(?\s*~?\s*[0-9]\s*%"]}]}
    assert grade_answer(checks, "Distributed optimizer first, then TP8 (~6%).").content_score == 0.0
    assert grade_answer(checks, "TP8 costs about 28%.").content_score == 1.0


def test_instead_of_denies_only_the_words_right_after_it() -> None:
    checks = {"claims": [{"label": "qkv", "patterns": [r"linear_qkv"], "key": True}]}
    far = "Instead of saving the all-gathered activation for the LoRA-A matmul on linear_qkv, it saves one shard."
    assert grade_answer(checks, far).content_score == 1.0
    assert grade_answer(checks, "Use linear_fc2 instead of linear_qkv.").content_score < 0.25


def test_last_is_a_hedge_for_a_wrong_recommendation() -> None:
    checks = {"wrong": ["raise-tp"], "claims": [{"label": "x", "patterns": ["recompute"], "key": True}]}
    from memtune.bench.dataset import load_claims, resolve_checks

    root = Path(__file__).resolve().parent.parent / "evals"
    resolved = resolve_checks(checks, load_claims(root / "claims.yaml"), "test")
    assert grade_answer(resolved, "Add recompute; raise TP last, it costs 28%.").content_score == 1.0
    assert grade_answer(resolved, "Add recompute and raise TP to 8.").content_score == 0.0


def test_sizes_with_a_thousands_multiplier_exact_short_numbers_and_growth_pairs() -> None:
    big = {"numbers": [{"label": "request", "bytes": 37631.79 * 2**30, "rel_tolerance": 0.02}]}
    assert grade_answer(big, "It asks for ~37.6k GiB.").content_score == 1.0
    one = {"numbers": [{"label": "request", "bytes": 2**30, "rel_tolerance": 0.02}]}
    assert grade_answer(one, "Request 1 GiB.").content_score == 1.0
    assert grade_answer({"numbers": [{"label": "x", "bytes": 1.015 * 2**30}]}, "about 1 GiB").content_score < 0.25
    growth = {"numbers": [{"label": "growth", "bytes": 2.89 * 2**30, "rel_tolerance": 0.02, "delta": True}]}
    assert grade_answer(growth, "Peak reserved rose from 4.69 to 7.58 GiB.").content_score == 1.0
    assert grade_answer(growth, "Peak reserved rose 4.69 → 9.58 GiB.").content_score < 0.25
    assert (
        grade_answer({**growth, "numbers": [{**growth["numbers"][0], "delta": False}]}, "4.69 → 7.58 GiB").content_score
        < 0.25
    )


def test_a_table_unit_header_code_ticks_an_arrow_and_a_labelled_verdict() -> None:
    sizes = {"numbers": [{"label": "request", "bytes": 448 * 2**20, "rel_tolerance": 0.01}]}
    table = "| | MiB |\n|---|---|\n| Failed request | 448.00 |\n"
    assert grade_answer(sizes, table).content_score == 1.0
    assert grade_answer(sizes, "| | count |\n|---|---|\n| Failed request | 448.00 |\n").content_score < 0.25
    workers = {"claims": [{"label": "fewer workers", "patterns": [r"\breduce\s+num_workers"], "key": True}]}
    assert grade_answer(workers, "Reduce `num_workers` to 2.").content_score == 1.0
    frag = {"claims": [{"label": "fragmentation", "patterns": [r"fragment\w*"], "key": True}]}
    assert grade_answer(frag, "The cache held enough, but not contiguously → fragmentation.").content_score == 1.0
    assert grade_answer(frag, "It is not fragmentation.").content_score < 0.25
    verdict = {"claims": [{"label": "no", "patterns": [r"^\W*no\b"], "key": True}]}
    assert grade_answer(verdict, "Short answer: no. It needs 94 GiB.").content_score == 1.0
    assert grade_answer(verdict, "Short answer: yes, it fits.").content_score < 0.25


def test_a_bold_question_asks_and_a_bold_label_introduces_its_value() -> None:
    wrong = {"wrong": [{"label": "is fragmentation", "patterns": [r"^\W*fragmentation\s+again\b"]}]}
    assert grade_answer(wrong, "**Q: Fragmentation again?** No, it is capacity.").content_score == 1.0
    assert grade_answer(wrong, "Fragmentation again. Set expandable segments.").content_score == 0.0
    verdict = {"claims": [{"label": "no fit", "patterns": [r"^\W*does\s*n[o’']?t\s+fit"], "key": True}]}
    assert grade_answer(verdict, "**Verdict:** doesn't fit in 80 GB.").content_score == 1.0


def test_an_allocator_option_pytorch_rejects_fails_the_answer_unless_the_user_wrote_it() -> None:
    """An invented allocator option (no task can list every one) is told apart by the project's
    own parser of PyTorch's allocator grammar; real options pass, and so does quoting the
    user's own broken string, or naming an invented one to say it does not exist."""
    from memtune.bench.inventions import rejected_alloc_settings

    assert rejected_alloc_settings("Set PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocManaged.") == [
        "backend:cudaMallocManaged"
    ]
    assert rejected_alloc_settings("export PYTORCH_ALLOC_CONF=sysmem_fallback:True") == ["sysmem_fallback:True"]
    for real in ("expandable_segments:True", "max_split_size_mb:128,garbage_collection_threshold:0.6",
                 "backend:cudaMallocAsync", "roundup_power2_divisions:4"):  # fmt: skip
        assert rejected_alloc_settings(f"PYTORCH_CUDA_ALLOC_CONF={real}") == [], real
    assert (
        rejected_alloc_settings("PYTORCH_CUDA_ALLOC_CONF=expandable_segments=True", given=["expandable_segments=True"])
        == []
    )

    checks = {"claims": [{"label": "fragmentation", "patterns": ["fragment"], "key": True}]}
    wrong = "Fragmentation. Set `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocManaged` so it pages to host memory."
    assert grade_answer(checks, wrong).content_score == 0.0
    denied = (
        "Fragmentation. There is no PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocManaged; set expandable_segments:True."
    )
    assert grade_answer(checks, denied).content_score == 1.0
    quoted = "Fragmentation, and your PYTORCH_CUDA_ALLOC_CONF=expandable_segments=True is rejected: use a colon."
    given = {**checks, "alloc_conf_given": ["expandable_segments=True"]}
    assert grade_answer(given, quoted).content_score == 1.0
    # not the user's string, but quoted as the failure ("is rejected"), not given as the setting
    assert grade_answer(checks, quoted).content_score == 1.0
    assert (
        grade_answer(checks, "Fragmentation: use PYTORCH_CUDA_ALLOC_CONF=expandable_segments=True.").content_score
        == 0.0
    )


def test_a_rejected_allocator_string_is_found_across_semicolons_in_code_spans_and_by_its_case() -> None:
    """Three ways the check once missed a rejected string: ";" between options cut it into two
    clauses; a value given alone in a code span, without the variable's name, was not read; and
    a case-blind match let a right "...:True" elsewhere stand for the rejected "...:true"."""
    checks = {"claims": [{"label": "fragmentation", "patterns": ["fragment"], "key": True}]}
    semicolons = (
        'Fragmentation. export PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True;garbage_collection_threshold:0.8"'
    )
    assert grade_answer(checks, semicolons).content_score == 0.0
    alone = "Fragmentation. The line to use is `expandable_segments:True;garbage_collection_threshold:0.8`."
    assert grade_answer(checks, alone).content_score == 0.0
    assert grade_answer(checks, "Fragmentation. The line to use is `expandable_segments:True`.").content_score == 1.0
    explained = (
        "Fragmentation. `expandable_segments=True` or `expandable_segments:true` fail at start-up; "
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
    )
    assert grade_answer(checks, explained).content_score == 1.0


def test_a_call_is_named_without_its_bracket_and_a_spaced_colon_is_a_character() -> None:
    """A bracket ends a clause, so a call's arguments cannot be denied by words before the call
    ("Without a restart you can still call f('expandable_segments:True')"), and wordings name a
    call without its "(" ("pickle.load"); a colon after a space is the character an answer names
    ("`=` instead of `:`"), not a label's end. "PyTorch reads ..." states what PyTorch does;
    only "PyTorch never reads" or "nothing reads" denies."""
    from memtune.bench.dataset import load_claims, resolve_claim

    library = load_claims(REPO / "evals" / "claims.yaml")
    pickle = {"wrong": [resolve_claim("myth-snapshot-pickle", library, "test")]}
    assert grade_answer(pickle, "Read it with pickle.load(open(path)) and walk the segments.").content_score == 0.0
    assert (
        grade_answer(pickle, "runtime_memory.py reads it without pickle.load(), so no code runs.").content_score == 1.0
    )
    setting = {"claims": [{"label": "setting", "patterns": [r"expandable_segments:True"], "key": True}]}
    call = "Without a restart you can still call torch.cuda.memory._set_allocator_settings('expandable_segments:True')."
    assert grade_answer(setting, call).content_score == 1.0
    colon = {"claims": [{"label": "colon", "patterns": [r"=\s+instead\s+of\s+:"], "key": True}]}
    assert (
        grade_answer(colon, "- `=` instead of `:` → PyTorch reads the token as one option name.").content_score == 1.0
    )
    wrong = {"claims": [], "wrong": [{"label": "exports it", "patterns": [r"export\s+the\s+setting"]}]}
    assert grade_answer(wrong, "Export the setting before launch as PyTorch reads it at start-up.").content_score == 0.0
    assert grade_answer(wrong, "Export the setting as PyTorch never reads it.").content_score == 1.0
    assert grade_answer(wrong, "Export the setting for a start as nothing reads it.").content_score == 1.0


def test_an_option_a_helper_does_not_have_fails_the_answer() -> None:
    """An invented helper option is an invented interface; the helper's own click command says
    which options exist. Real options, other tools' flags and denied inventions pass."""
    from memtune.bench.inventions import unknown_helper_options

    assert unknown_helper_options("python3 scripts/trace_regression.py a.log b.log --fail-on-oom") == ["--fail-on-oom"]
    real = "`python3 scripts/plan_memory.py --preset llama3-70b --gpus 32 --tp 4 --pp 4 --gpu-memory 80GiB --json`"
    assert unknown_helper_options(real) == []
    assert unknown_helper_options("`python3 scripts/diagnose.py train.log` then `srun --mem 0`") == []
    # an option of another helper is not this helper's
    assert unknown_helper_options("python3 scripts/diagnose.py train.log --tp 4") == ["--tp"]
    # each helper on a line keeps its own options (diagnose prints "check_env ...; then plan_memory ...")
    two = "python3 scripts/check_env.py --config bridge.yaml (MT004); then python3 scripts/plan_memory.py --tp 4 --bogus 1"
    assert unknown_helper_options(two) == ["--bogus"]

    checks = {"claims": [{"label": "regressed", "patterns": ["regress"], "key": True}]}
    invented = "It regressed; gate CI on `python3 scripts/trace_regression.py a.log b.log --fail-on-oom`."
    assert grade_answer(checks, invented).content_score == 0.0
    denied = "It regressed. Don't run `python3 scripts/trace_regression.py a.log b.log --fail-on-oom`: no such option."
    assert grade_answer(checks, denied).content_score == 1.0


def test_a_megatron_option_that_never_existed_fails_the_answer() -> None:
    """An invented Megatron-LM flag is a real one misremembered (--overlap-grad-allreduce for
    --overlap-grad-reduce); the project's list of Megatron-LM's arguments, now and at every
    earlier commit, tells it from a real flag, an old one and another tool's option."""
    from memtune.bench.inventions import unknown_megatron_options

    invented = "Add --overlap-grad-allreduce and --overlap-param-scatter to the launch line."
    assert unknown_megatron_options(invented) == ["--overlap-grad-allreduce", "--overlap-param-scatter"]
    assert unknown_megatron_options("Pass --lr-warmup-memory-fraction 0.1.") == ["--lr-warmup-memory-fraction"]
    real = (
        "Use --overlap-grad-reduce --overlap-param-gather --use-distributed-optimizer --recompute-granularity selective"
    )
    assert unknown_megatron_options(real) == []
    # underscores are how argparse users sometimes write it; the name is the same
    assert unknown_megatron_options("--use_distributed_optimizer") == []
    # removed from Megatron-LM since, but a real flag of earlier releases
    assert unknown_megatron_options("Older releases had --overlap-p2p-communication and --checkpoint-activations") == []
    # other tools' options do not start like a Megatron option ...
    assert unknown_megatron_options("srun --container-image nvcr.io/x --ntasks-per-node 8; nsys --capture-range") == []
    # ... and where they might (vLLM --max-num-seqs against --max-num-samples) the answer names the tool
    assert unknown_megatron_options("Lower --max-num-seqs in vLLM.") == []
    assert unknown_megatron_options("Lower --max-num-seqs.") == ["--max-num-seqs"]
    # this skill's helper options and the user's own options are not Megatron-LM's to judge
    assert unknown_megatron_options("python3 scripts/plan_memory.py --gpu-memory 80GiB") == []
    assert (
        unknown_megatron_options("Your --overlap-grad-allreduce is ignored.", given=["--overlap-grad-allreduce"]) == []
    )

    checks = {"claims": [{"label": "overlap", "patterns": ["overlap"], "key": True}]}
    assert grade_answer(checks, invented).content_score == 0.0
    denied = "Turn on overlap with --overlap-grad-reduce; there is no --overlap-grad-allreduce flag."
    assert grade_answer(checks, denied).content_score == 1.0


def test_a_figure_given_to_the_wrong_option_fails_the_answer() -> None:
    """Two measured costs swapped (TP8 -5.9%, PP8 -28.4%) turn the advice around although every
    number is present; comparisons that keep each figure with its option pass."""
    checks = {
        "numbers": [{"label": "TP8 cost", "value": 28.4, "tolerance": 0.6, "unit": "%"}],
        "figures": [
            {"subject": r"\bTP\s*8\b", "value": 28.4, "tolerance": 0.6, "unit": "%"},
            {"subject": r"\bPP\s*8\b", "value": 5.9, "tolerance": 0.3, "unit": "%"},
        ],
    }
    swapped = [
        "TP8 costs only 5.9%. PP8 is the expensive one at 28.4%.",
        "Cheapest: TP8 (-5.9%: it stays in the NVLink domain), then PP8 with DP1 (-28.4%).",
        "TP8 -5.9% and PP8/DP1 -28.4%, so take TP8.",
    ]
    for answer in swapped:
        assert grade_answer(checks, answer).content_score == 0.0, answer
    kept = [
        "TP8 costs 28.4% while PP8 costs 5.9%.",
        "PP8 (-5.9%) beats TP8 (-28.4%).",
        "Compared with the -5.9% of PP8, TP8 at -28.4% is the last resort.",
        "Is TP8 really 5.9%? No: TP8 measured -28.4%.",
    ]
    for answer in kept:
        assert grade_answer(checks, answer).content_score == 1.0, answer


def test_an_option_starting_with_a_word_only_megatron_uses_is_judged_whole() -> None:
    """--recompute-all-layers shares no two-word family with a real option, yet only Megatron-LM's
    options start with "recompute": it is invented. Real options of those words pass, and the
    words no other tool in the answers uses are the only ones judged this way."""
    from memtune.bench.inventions import DISTINCT_FIRST_WORDS, unknown_megatron_options

    invented = "Add --recompute-all-layers and --overlap-tp-gemm to the launch line."
    assert unknown_megatron_options(invented) == ["--recompute-all-layers", "--overlap-tp-gemm"]
    real = "--recompute-granularity full --recompute-method uniform --overlap-grad-reduce --ckpt-format torch_dist --moe-token-dispatcher-type alltoall"
    assert unknown_megatron_options(real) == []
    # pyxis, TGI, PyTorch's examples and Meta's Llama scripts use these words unnamed
    assert not {"no", "max", "dist", "ckpt"} & DISTINCT_FIRST_WORDS
    unnamed = (
        "srun --no-container-mount-home; --max-batch-prefill-tokens 4096; --dist-url tcp://h:23456 --ckpt_dir llama/"
    )
    assert unknown_megatron_options(unnamed) == []
    assert unknown_megatron_options("python -m sglang_router.launch_server --tp-size 8") == []  # SGLang named
    assert unknown_megatron_options("Set --tp-size 8.") == ["--tp-size"]


def test_a_pyxis_option_that_never_existed_fails_the_answer() -> None:
    """pyxis adds only --container-* / --no-container-* options to srun; one of that shape that
    no pyxis release had (--container-bind) is invented. Real ones and other srun options pass."""
    from memtune.bench.inventions import unknown_pyxis_options

    assert unknown_pyxis_options("srun --container-bind=/data:/data python x.py") == ["--container-bind"]
    real = "srun --ntasks-per-node=8 --container-image=nvcr.io/nvidia/nemo:25.09 --container-mounts=/d:/d --no-container-mount-home"
    assert unknown_pyxis_options(real) == []
    assert unknown_pyxis_options("--container-env=FOO --container-writable --no-container-entrypoint") == []
    checks = {"claims": [{"label": "pyxis", "patterns": ["container-image"], "key": True}]}
    assert grade_answer(checks, "srun --container-image=x --container-volume=/a:/a train.py").content_score == 0.0
    assert grade_answer(checks, "srun --container-image=x --container-mounts=/a:/a train.py").content_score == 1.0


@pytest.mark.parametrize(
    ("answer", "invented"),
    [
        ("export CUDA_ALLOC_CONF=expandable_segments:True before srun", ["CUDA_ALLOC_CONF"]),
        ('echo "$CUDA_ALLOC_CONF" to check it is set', ["CUDA_ALLOC_CONF"]),
        ("os.environ['TORCH_CUDA_EXPANDABLE_SEGMENTS'] = '1'", ["TORCH_CUDA_EXPANDABLE_SEGMENTS"]),
        ("MEGATRON_ALLOC_CONF=expandable_segments:True torchrun ...", ["MEGATRON_ALLOC_CONF"]),
        ("PYTORCH_CUDA_ALLOC_CONFIG=expandable_segments:True", ["PYTORCH_CUDA_ALLOC_CONFIG"]),
        ("raise NCCL_TIMEOUT=3600 and set NCCL_BUFFER_SIZE=4194304", ["NCCL_TIMEOUT", "NCCL_BUFFER_SIZE"]),
        ("NCCL_MEM_RESERVE_MB=2048 keeps NCCL's buffers out of the way", ["NCCL_MEM_RESERVE_MB"]),
        ("export NVTE_ACTIVATION_OFFLOAD=1 to move activations to the host", ["NVTE_ACTIVATION_OFFLOAD"]),
    ],
)
def test_an_environment_variable_nothing_reads_is_found(answer: str, invented: list[str]) -> None:
    from memtune.bench.inventions import unknown_environment_variables

    assert unknown_environment_variables(answer) == invented


@pytest.mark.parametrize(
    "answer",
    [
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "on 2.9 and later PYTORCH_ALLOC_CONF=expandable_segments:True; on ROCm PYTORCH_HIP_ALLOC_CONF",
        "NCCL_BUFFSIZE=2097152 NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC NCCL_GRAPH_REGISTER=0",
        "NCCL_BLOCKING_WAIT=1 is the older spelling of TORCH_NCCL_BLOCKING_WAIT",  # PyTorch's own alias
        "NCCL_SINGLE_RING_THRESHOLD and NCCL_SHARP_DISABLE are real too",  # NCCL 2.2 docs; SHARP plugin
        "CUDA_DEVICE_MAX_CONNECTIONS=1 TORCH_NCCL_AVOID_RECORD_STREAMS=1 CUDA_VISIBLE_DEVICES=0,1",  # not judged
        "NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1 NVTE_FWD_LAYERNORM_SM_MARGIN=8",
        "on Ascend, torch_npu reads PYTORCH_NPU_ALLOC_CONF=expandable_segments:True",  # a device plugin's own
        "NCCL_FASTRAK_CTRL_DEV=eth0 NCCL_GPUDIRECTTCPX_SOCKET_IFNAME=eth1 NCCL_TESTS_SPLIT_MASK=0x7 NVTE_CK_USES_BWD_V3=1",
    ],
)
def test_real_environment_variables_pass(answer: str) -> None:
    from memtune.bench.inventions import unknown_environment_variables

    assert unknown_environment_variables(answer) == []


@pytest.mark.parametrize(
    "sentence",
    [
        "NCCL_TIMEOUT does not exist; use the timeout argument of init_process_group.",
        "Note that CUDA_ALLOC_CONF is a common typo; PyTorch only reads PYTORCH_CUDA_ALLOC_CONF.",
        "Beware of TORCH_CUDA_ALLOC_CONF, which PyTorch never reads.",
        "If you misspell it as CUDA_ALLOC_CONF, nothing happens.",
        "Setting CUDA_ALLOC_CONF has no effect; the variable is PYTORCH_CUDA_ALLOC_CONF.",
    ],
)
def test_an_invented_name_that_the_answer_calls_wrong_passes(sentence: str) -> None:
    from memtune.bench.inventions import unknown_environment_variables

    assert unknown_environment_variables(sentence)  # the name is found ...
    assert grade_answer({}, sentence).content_score == 1.0  # ... and the answer's own denial spares it


def test_an_invented_environment_variable_fails_the_answer_unless_denied_or_the_users() -> None:
    """An answer with every right word that tells the user to export CUDA_ALLOC_CONF changes
    nothing on the user's job: it fails. Saying that name is not read, or quoting the user's own
    (misnamed) variable from the question or files, does not."""
    checks = {"claims": [{"label": "expandable", "patterns": ["expandable_segments:True"], "key": True}]}
    wrong = "Fragmentation: export CUDA_ALLOC_CONF=expandable_segments:True before launch."
    assert grade_answer(checks, wrong).content_score == 0.0
    right = "Fragmentation: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before launch."
    assert grade_answer(checks, right).content_score == 1.0
    denied = right + " Do not set CUDA_ALLOC_CONF: nothing reads it."
    assert grade_answer(checks, denied).content_score == 1.0
    assert grade_answer({**checks, "env_given": ["CUDA_ALLOC_CONF"]}, wrong).content_score == 1.0


def test_the_environment_name_lists_hold_what_the_check_relies_on() -> None:
    """The allocator list is exactly PyTorch's four names; the NCCL and NVTE lists are harvests of
    those projects' source history (hundreds of names each), not a hand-picked few."""
    from memtune.bench.inventions import environment_names

    allocator, families, plugins = environment_names()
    assert allocator == {
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_HIP_ALLOC_CONF",
        "PYTORCH_XPU_ALLOC_CONF",
    }
    assert len(families["NCCL_"]) > 400 and len(families["NVTE_"]) > 250
    assert {"NCCL_BUFFSIZE", "NCCL_IB_TIMEOUT", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"} <= families["NCCL_"]
    assert {"NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_ALLOW_NONDETERMINISTIC_ALGO"} <= families["NVTE_"]
    assert all(name.startswith(prefix) for prefix, names in families.items() for name in names)
    assert plugins and all(prefix.startswith(tuple(families)) for prefix in plugins)


def test_an_allocator_fix_for_an_oversized_request_in_a_small_agents_words() -> None:
    """The forced run's 1.5B agent writes the allocator fix as "fix this by setting
    PYTORCH_CUDA_ALLOC_CONF=..." or "the fix is to set PYTORCH_CUDA_ALLOC_CONF=...": for a request
    larger than the GPU both are the wrong fix; saying it will not help is not."""
    from memtune.bench.dataset import load_dataset

    checks = load_dataset(REPO / "evals" / "evals.json").by_id()["log-framepack-huge-alloc"].checks
    for wrong in (
        "30.29 GiB is more than the 10.74 GiB GPU. You can fix this by setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
        "30.29 GiB is more than the 10.74 GiB GPU. The fix is to set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.",
    ):
        assert grade_answer(checks, wrong).content_score == 0.0, wrong
    right = (
        "30.29 GiB is more than the whole 10.74 GiB GPU, so no allocator setting can help: setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True would not fix it. Shrink the batch or resolution."
    )
    assert grade_answer(checks, right).content_score >= 0.8


def test_a_claim_is_not_asserted_in_a_context_its_unless_wordings_name() -> None:
    """``unless``: the same words are true in some contexts. empty_cache() cannot prevent an OOM
    of PyTorch's own allocator (it frees its idle blocks and retries before raising one), but
    memory that NCCL or cuBLAS allocate outside it can gain from the call."""
    claim = {
        "label": "empty_cache as a fix",
        "patterns": [r"\bcall\w*\s+(?:torch\.cuda\.)?empty_cache\b"],
        "unless": [r"\bNCCL\b"],
        "hedge": False,
        "scope": "sentence",
    }
    checks = {"wrong": [claim]}
    assert grade_answer(checks, "Call torch.cuda.empty_cache() after every step.").content_score == 0.0
    right = "Call torch.cuda.empty_cache() before the first all-reduce, so NCCL finds room for its buffers."
    grade = grade_answer(checks, right)
    assert grade.content_score == 1.0
    assert "in the context 'NCCL'" in grade.checks[0].detail
    # the context must be in the same sentence
    two = "NCCL is fine. Call torch.cuda.empty_cache() after every step."
    assert grade_answer(checks, two).content_score == 0.0


def test_verbs_of_effect_deny_a_wrong_claim_but_not_a_required_one() -> None:
    """ "does not lower" denies a wrong claim's effect; after a required claim it qualifies it
    ("expandable segments will not lower the allocated peak but remove the idle reserve")."""
    required = {"claims": [{"label": "expandable", "patterns": [r"expandable_segments:True"], "key": True}]}
    text = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before launch will not lower the allocated peak."
    assert grade_answer(required, text).content_score == 1.0
    wrong = {"wrong": [{"label": "no cache", "patterns": [r"PYTORCH_NO_CUDA_MEMORY_CACHING=1"]}]}
    assert grade_answer(wrong, "PYTORCH_NO_CUDA_MEMORY_CACHING=1 does not lower the peak.").content_score == 1.0


def test_e_g_does_not_end_a_sentence() -> None:
    from memtune.bench.grading import spans, whole_sentences

    text = "Set CUDA_LAUNCH_BLOCKING=1, e.g. to debug. Then rerun."
    assert len(whole_sentences(spans(text))) == 2
