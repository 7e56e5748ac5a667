"""trace_regression.py on configurations: knob attribution, --git, the JSON contract, bad input.

The user question behind it: "memory went from 61 to 72 GB per GPU after I switched PP4->PP2
and turned on --overlap-param-gather; which change did it?" The pair in tests/data/trace/ is
Megatron-LM's published Mixtral 8x7B script with exactly those two edits (SOURCE.md).
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from helper_cli import invoke, invoke_json
from memtune.errors import InputError
from memtune.estimate.estimator import estimate
from memtune.runtime.attribution import MODELLED, UNMODELLED, attribute, knob_changes
from memtune.spec import presets
from memtune.spec.run_spec import RunSpec

DATA = REPO_ROOT / "tests" / "data" / "trace"
#: Inputs a Tier-3 task hands to the agent too: one copy, in evals/files (provenance in
#: tests/data/trace/SOURCE.md).
EVAL_FILES = REPO_ROOT / "evals" / "files"
IN_EVAL_FILES = frozenset(
    {
        "mixtral_pp4.sh",
        "mixtral_pp2_overlap.sh",
        "g01_base.sh",
        "g05_mbs2.sh",
        "report_memory_g01_base.log",
        "report_memory_g05_mbs2.log",
        "probe_capacity_default_memory_summary.txt",
        "probe_capacity_expandable_memory_summary.txt",
    }
)


def _path(name: str) -> str:
    return str((EVAL_FILES if name in IN_EVAL_FILES else DATA) / name)


PP4, PP2 = _path("mixtral_pp4.sh"), _path("mixtral_pp2_overlap.sh")
SCHEMA = REPO_ROOT / "scripts" / "memtune" / "data" / "schemas" / "output" / "trace_regression.schema.json"
HELPER = "trace_regression"


def assert_schema(doc: dict) -> None:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]]


def known_sum(doc: dict) -> int:
    return sum(c["delta_bytes"] for c in doc["changes"] if c["delta_bytes"] is not None)


# ------------------------------------------------------------------ the user's question
def test_pp_change_is_the_cause_and_overlap_param_gather_is_unmodelled_not_zero() -> None:
    doc = invoke_json(HELPER, PP4, PP2, "--gpu", "H100-80GB", "--json")
    assert_schema(doc)
    by = {c["knob"]: c for c in doc["changes"]}
    assert set(by) == {"pp", "overlap_param_gather"}
    assert (by["pp"]["before"], by["pp"]["after"], by["pp"]["status"]) == (4, 2, MODELLED)
    assert by["pp"]["delta_bytes"] > 0
    assert by["overlap_param_gather"]["status"] == UNMODELLED
    assert by["overlap_param_gather"]["delta_bytes"] is None  # never reported as 0 bytes
    assert doc["unmodelled"] == ["overlap_param_gather"]
    assert doc["main_cause"] == "pp"
    # the peaks are the estimator's own, and the split adds up exactly
    direct = [invoke_json("estimate_memory", "--megatron-args", p, "--json")["peak_bytes"] for p in (PP4, PP2)]
    assert [doc["a"]["peak_bytes"], doc["b"]["peak_bytes"]] == direct
    assert doc["delta_bytes"] == direct[1] - direct[0]
    assert known_sum(doc) + doc["interaction_bytes"] == doc["delta_bytes"]
    assert doc["regressed"] is (doc["delta_bytes"] > doc["threshold_bytes"])


def test_text_names_the_cause_and_says_unknown_not_zero() -> None:
    out = invoke(HELPER, PP4, PP2)
    assert out.exit_code == 0, out.stderr
    assert "Largest modelled cause: pp 4 -> 2" in out.stdout
    assert "overlap_param_gather" in out.stdout and "unknown, not zero" in out.stdout


def test_reverse_direction_negates_the_delta() -> None:
    ab = invoke_json(HELPER, PP4, PP2, "--json")
    ba = invoke_json(HELPER, PP2, PP4, "--json")
    assert ba["delta_bytes"] == -ab["delta_bytes"]
    assert ba["main_cause"] == "pp"


def test_identical_inputs_have_no_changes() -> None:
    doc = invoke_json(HELPER, PP4, PP4, "--json")
    assert doc["changes"] == [] and doc["delta_bytes"] == 0 and doc["interaction_bytes"] == 0
    assert doc["main_cause"] is None and doc["regressed"] is False


def test_threshold_decides_regressed() -> None:
    doc = invoke_json(HELPER, PP4, PP2, "--json", "--threshold", "1000%")
    assert doc["regressed"] is False
    doc = invoke_json(HELPER, PP4, PP2, "--json", "--threshold", "1GiB")
    assert doc["threshold_bytes"] == 2**30 and doc["regressed"] is True


# ------------------------------------------------------------------ the split, as a property
LAYOUTS = [
    {"tp": 1, "pp": 1},
    {"tp": 2, "pp": 2, "sequence_parallel": True},
    {"tp": 4, "pp": 4, "sequence_parallel": True},
    {"tp": 4, "pp": 2, "vpp": 2, "sequence_parallel": True},
    {"tp": 8, "pp": 1, "sequence_parallel": True},
]
KNOBS = {
    "mbs": [1, 2, 4],
    "gbs": [64, 128, 512],
    "seq_length": [2048, 4096, 8192],
    "use_distributed_optimizer": [True, False],
    "recompute_granularity": [None, "selective", "full"],
    "grad_reduce_in_fp32": [True, False],
    "overlap_param_gather": [True, False],
    "overlap_grad_reduce": [True, False],
    "cp": [1, 2],
}


def _random_run(rng: random.Random) -> RunSpec:
    layout = rng.choice(LAYOUTS)
    run = RunSpec(world_size=64, **layout)
    return run.with_(**{k: rng.choice(v) for k, v in KNOBS.items() if rng.random() < 0.6})


@pytest.mark.parametrize("seed", range(40))
def test_changes_plus_interaction_equal_the_delta_exactly(seed: int) -> None:
    rng = random.Random(seed)
    model = presets.load_preset(rng.choice(["llama3-8b", "llama3-70b", "qwen3-8b"]))
    a, b = _random_run(rng), _random_run(rng)
    try:
        result = attribute(model, a, model, b)
    except InputError:
        pytest.skip("A or B is an impossible run for this model")
    assert result.delta_bytes == estimate(model, b).peak_bytes - estimate(model, a).peak_bytes
    assert result.explained_bytes + result.interaction_bytes == result.delta_bytes
    names = [n for c in result.changes for n in c.knob.name.split("+")]
    assert sorted(names) == sorted(k.name for k in knob_changes(model, a, model, b))  # each knob once
    for c in result.changes:
        if c.status == MODELLED:  # each figure is the estimator's, for A with only that change
            after = c.knob.after if "+" in c.knob.name else {c.knob.name: c.knob.after}
            assert c.delta_bytes == estimate(model, a.with_(**after)).peak_bytes - estimate(model, a).peak_bytes
        else:
            assert c.delta_bytes is None


def test_a_single_knob_has_no_interaction() -> None:
    model = presets.load_preset("llama3-8b")
    a = RunSpec(world_size=8, tp=2, sequence_parallel=True, use_distributed_optimizer=True)
    result = attribute(model, a, model, a.with_(mbs=4))
    assert [c.knob.name for c in result.changes] == ["mbs"]
    assert result.interaction_bytes == 0 and result.changes[0].delta_bytes == result.delta_bytes > 0


def test_unmodelled_is_observed_from_what_the_estimator_reads() -> None:
    """A knob counts as modelled when the estimator reads it, whatever its figure: an
    estimator that reads mbs but ignores it yields a modelled 0, one that never reads it
    an unmodelled knob with no figure."""
    model = presets.load_preset("llama3-8b")
    a = RunSpec(world_size=8)
    b = a.with_(mbs=2, seq_length=8192)

    class Peak:
        def __init__(self, value: int) -> None:
            self.peak_bytes, self.peak_stage = value, 0

    def reads_mbs_only(m, run):  # the value is read and thrown away
        _ = run.mbs
        return Peak(1000)

    result = attribute(model, a, model, b, estimator=reads_mbs_only)
    by = {c.knob.name: c for c in result.changes}
    assert (by["mbs"].status, by["mbs"].delta_bytes) == (MODELLED, 0)
    assert (by["seq_length"].status, by["seq_length"].delta_bytes) == (UNMODELLED, None)


def test_knobs_that_only_make_sense_together_are_priced_as_one_change() -> None:
    """Micro-batch 1 -> 2 with global batch 1 -> 2 (the H200 g01 -> g05 pair): mbs alone is
    impossible (gbs 1 is not a multiple of 2), so the two are one entry, mbs+gbs."""
    doc = invoke_json(HELPER, _path("g01_base.sh"), _path("g05_mbs2.sh"), "--gpus", "1", "--json")
    assert [c["knob"] for c in doc["changes"]] == ["mbs+gbs"]
    joined = doc["changes"][0]
    assert joined["before"] == {"mbs": 1, "gbs": 1} and joined["after"] == {"mbs": 2, "gbs": 2}
    assert joined["status"] == MODELLED and joined["delta_bytes"] == doc["delta_bytes"] > 0
    assert doc["interaction_bytes"] == 0 and doc["main_cause"] == "mbs+gbs"


def test_a_knob_no_partner_rescues_stays_illegal_alone() -> None:
    model = presets.load_preset("llama3-8b")  # 32 layers
    a = RunSpec(world_size=12, pp=4)
    b = a.with_(pp=3, num_layers_in_first_pipeline_stage=9, num_layers_in_last_pipeline_stage=9)
    result = attribute(model, a, model, b)
    by = {c.knob.name: c for c in result.changes}
    assert set(by) == {"pp", "num_layers_in_first_pipeline_stage+num_layers_in_last_pipeline_stage"}
    assert by["pp"].status == "illegal-alone" and by["pp"].delta_bytes is None
    assert result.explained_bytes + result.interaction_bytes == result.delta_bytes


# ------------------------------------------------------------------ --git
def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    import os

    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture()
def history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A repository where launch/train.sh goes PP4 -> (README edit) -> mbs 2 -> PP2 + overlap."""
    repo = tmp_path / "repo"
    (repo / "launch").mkdir(parents=True)
    _git(repo, "init", "-q")
    script = repo / "launch" / "train.sh"
    text = Path(PP4).read_text()
    commits = []
    for subject, content in (
        ("baseline PP4", text),
        ("docs only", None),
        ("micro-batch 2", text.replace("--micro-batch-size 1", "--micro-batch-size 2")),
        ("PP2 and overlap", Path(PP2).read_text().replace("--micro-batch-size 1", "--micro-batch-size 2")),
    ):
        if content is None:
            (repo / "README").write_text("notes\n")
        else:
            script.write_text(content)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", subject)
        commits.append(_git(repo, "rev-parse", "HEAD"))
    monkeypatch.chdir(repo)
    return repo, commits


def test_git_names_the_first_commit_over_the_limit(history: tuple[Path, list[str]]) -> None:
    _, commits = history
    peaks = {}
    for name, path in (("pp4", PP4), ("pp2", PP2)):
        peaks[name] = invoke_json("estimate_memory", "--megatron-args", path, "--mbs", "2", "--json")["peak_bytes"]
    limit = (peaks["pp4"] + peaks["pp2"]) // 2  # micro-batch 2 fits, PP2 on top does not
    doc = invoke_json(
        HELPER, "--git", f"{commits[0]}..HEAD", "--gpu-memory", f"{limit}B", "--json", "--", "launch/train.sh"
    )
    assert_schema(doc)
    git = doc["git"]
    assert [s["subject"] for s in git["commits"]] == ["micro-batch 2", "PP2 and overlap"]  # docs-only commit skipped
    assert git["first_over_limit"]["commit"] == commits[3]
    assert git["commits"][0]["fits"] is True and git["commits"][1]["peak_bytes"] == peaks["pp2"]
    assert {c["knob"] for c in doc["changes"]} == {"pp", "mbs", "overlap_param_gather"}
    assert known_sum(doc) + doc["interaction_bytes"] == doc["delta_bytes"]
    text = invoke(HELPER, "--git", f"{commits[0]}..HEAD", "--gpu-memory", f"{limit}B", "--", "launch/train.sh")
    assert f"First commit over the limit: {commits[3][:12]} PP2 and overlap" in text.stdout


def test_git_without_a_limit_says_so(history: tuple[Path, list[str]]) -> None:
    _, commits = history
    doc = invoke_json(HELPER, "--git", f"{commits[0]}..HEAD", "--json", "--", "launch/train.sh")
    assert doc["git"]["first_over_limit"] is None and doc["gpu_memory_bytes"] is None
    assert any("--gpu" in n for n in doc["notes"])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--git", "HEAD", "--", "launch/train.sh"), ["main..HEAD"]),
        (("--git", "--output=x..HEAD", "--", "launch/train.sh"), ["--git"]),
        (("--git", "nosuchrev..HEAD", "--", "launch/train.sh"), ["nosuchrev"]),
        (("--git", "HEAD~1..HEAD", "--", "../etc/passwd"), [".."]),
        (("--git", "HEAD~1..HEAD", "--", "launch/missing.sh"), ["missing.sh"]),
        (("--git", "HEAD~1..HEAD", "a", "b"), ["one file"]),
    ],
)
def test_git_bad_input_is_one_line_exit_2(
    history: tuple[Path, list[str]], args: tuple[str, ...], words: list[str]
) -> None:
    out = invoke(HELPER, *args)
    assert out.exit_code == 2, out.stdout
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    for word in words:
        assert word in out.stderr


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((PP4,), ["two inputs"]),
        ((PP4, PP2, PP2), ["two inputs"]),
        ((PP4, "nope.sh"), ["nope.sh"]),
        ((PP4, PP2, "--threshold", "-5%"), ["negative"]),
        ((PP4, PP2, "--threshold", "lots"), ["lots"]),
        ((PP4, PP2, "--preset", "llama3-8b"), ["drop --preset"]),
        ((PP4, PP2, "--gpu", "H100", "--gpu-memory", "80GiB"), ["not both"]),
    ],
)
def test_bad_input_is_one_line_exit_2(args: tuple[str, ...], words: list[str]) -> None:
    out = invoke(HELPER, *args)
    assert out.exit_code == 2, out.stdout
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    for word in words:
        assert word in out.stderr


def test_bridge_yaml_pair(tmp_path: Path) -> None:
    """Two Bridge configs (the seed example and a copy with PP 2 and a bigger micro-batch)."""
    from memtune.files.paths import DATA_DIR

    base = (DATA_DIR / "examples" / "llama3-70b-sft-32gpu.yaml").read_text()
    before = tmp_path / "before.yaml"
    before.write_text(base)
    assert "pipeline_model_parallel_size: 4" in base and "micro_batch_size: 1" in base
    after = tmp_path / "after.yaml"
    after.write_text(
        base.replace("pipeline_model_parallel_size: 4", "pipeline_model_parallel_size: 2").replace(
            "virtual_pipeline_model_parallel_size: 5", "virtual_pipeline_model_parallel_size: 10"
        )
    )
    doc = invoke_json(HELPER, str(before), str(after), "--json")
    assert_schema(doc)
    assert doc["a"]["kind"] == doc["b"]["kind"] == "bridge-config"
    assert {"pp", "vpp"} <= {c["knob"] for c in doc["changes"]}
    assert known_sum(doc) + doc["interaction_bytes"] == doc["delta_bytes"]
    keys = {f["flag"]: f for f in doc["flags"]}
    assert keys["model.pipeline_model_parallel_size"]["knobs"] == ["pp"]
    assert keys["model.pipeline_model_parallel_size"]["status"] == "mapped"


def test_bridge_keys_no_reader_maps_are_unmodelled_and_paths_are_not(tmp_path: Path) -> None:
    from memtune.files.paths import DATA_DIR

    base = (DATA_DIR / "examples" / "llama3-70b-sft-32gpu.yaml").read_text()
    before = tmp_path / "before.yaml"
    before.write_text(base)
    after = tmp_path / "after.yaml"
    after.write_text(base + "comm_overlap:\n  tp_comm_overlap: true\ncheckpoint:\n  save: /ckpt/run2\n")
    doc = invoke_json(HELPER, str(before), str(after), "--json")
    assert_schema(doc)
    keys = {f["flag"]: f for f in doc["flags"]}
    assert keys["comm_overlap.tp_comm_overlap"]["status"] == "not-modelled"
    assert keys["checkpoint.save"]["status"] == "no-memory-effect"
    assert "comm_overlap.tp_comm_overlap" in doc["unmodelled"] and "checkpoint.save" not in doc["unmodelled"]
    assert doc["changes"] == [] and doc["delta_bytes"] == 0  # no spec field moved


# ------------------------------------------------------------------ two measurements
#: The H200 texts the runtime reader's own corpus already holds (one copy, its SOURCE.md).
SAMPLES = REPO_ROOT / "tests" / "data" / "runtime-samples"


def _sample(folder: str, name: str) -> str:
    return str(SAMPLES / folder / name)


C01, C07 = (
    _sample("h200-mcore", f"memory_summary_{n}.txt") for n in ("c01_h1024_l4_gpt2", "c07_h8192_l4_tied_distopt")
)
G01, G05, G08 = (_path(f"report_memory_{n}.log") for n in ("g01_base", "g05_mbs2", "g08_dropout"))


def test_measurements_regressed_exit_1_with_the_readers_figures() -> None:
    from memtune.runtime.read import read_measurements

    doc = invoke_json(HELPER, C01, C07, "--json", codes=(1,))
    assert_schema(doc)
    assert doc["mode"] == "measurement" and doc["regressed"] is True and doc["regressed_ranks"] == [0]
    a, b = read_measurements([C01]), read_measurements([C07])
    assert doc["figure"] == "peak_reserved_bytes"
    assert doc["delta_bytes"] == b.peak_reserved_bytes - a.peak_reserved_bytes  # type: ignore[operator]
    rank = doc["ranks"][0]
    figures = {f["figure"]: f for f in rank["figures"]}
    assert figures["peak_allocated_bytes"]["delta_bytes"] == b.peak_allocated_bytes - a.peak_allocated_bytes  # type: ignore[operator]
    assert doc["threshold_bytes"] == int(a.peak_reserved_bytes * 0.05)  # type: ignore[operator]


def test_improvement_and_noise_exit_0() -> None:
    assert invoke(HELPER, C07, C01).exit_code == 0  # B needs less: not a regression
    default = _path("probe_capacity_default_memory_summary.txt")
    expandable = _path("probe_capacity_expandable_memory_summary.txt")
    doc = invoke_json(HELPER, default, expandable, "--json")
    assert doc["regressed"] is False and 0 < doc["delta_bytes"] < doc["threshold_bytes"]
    # the same 16 MiB with no allowance is a regression: the threshold decides, not the code
    doc = invoke_json(HELPER, default, expandable, "--json", "--threshold", "0%", codes=(1,))
    assert doc["regressed"] is True


def test_report_memory_logs_per_rank_and_in_bytes() -> None:
    doc = invoke_json(HELPER, G01, G05, "--json", codes=(1,))
    assert_schema(doc)
    measured = {r["name"]: r for r in json.loads((REPO_ROOT / "tests/data/trace/measured_g.json").read_text())}
    own = {n: max(s["peak_reserved"] for s in r["steps"]) - r["baseline_allocated"] for n, r in measured.items()}
    expected = own["g05_mbs2"] - own["g01_base"]
    assert abs(doc["delta_bytes"] - expected) <= doc["resolution_bytes"]
    assert doc["a"]["formats"] == ["report_memory"]


def test_nvidia_smi_only_compares_device_memory() -> None:
    from memtune.runtime.read import read_measurements

    idle, busy = (
        _sample("h200-mcore", n) for n in ("env_nvidia_smi_idle.txt", "nvidia_smi_c07_h8192_l4_tied_distopt.txt")
    )
    doc = invoke_json(HELPER, idle, busy, "--json", codes=(1,))
    assert doc["figure"] == "device_used_bytes"
    assert (
        doc["delta_bytes"]
        == read_measurements([busy]).gpus[0].used_bytes - read_measurements([idle]).gpus[0].used_bytes
    )
    # nvidia-smi printed MiB: the c07 run's device memory, as measured.json records it, to the MiB
    assert abs(doc["b"]["peak_bytes"] - 64314212352) < 2**20


def test_text_says_regressed_per_rank() -> None:
    out = invoke(HELPER, C01, C07)
    assert out.exit_code == 1
    assert "REGRESSED" in out.stdout and "rank 0:" in out.stdout


# ------------------------------------------------------------------ measurement + config
def test_measured_change_held_against_the_knobs() -> None:
    doc = invoke_json(HELPER, G01, G05, _path("g01_base.sh"), _path("g05_mbs2.sh"), "--gpus", "1", "--json", codes=(1,))
    assert_schema(doc)
    assert doc["mode"] == "measurement+config" and doc["measured"]["regressed"] is True
    ex = doc["explanation"]
    assert ex["figure"] == "peak_allocated_bytes" and ex["main_cause"] == "mbs+gbs"
    assert ex["estimated_delta_bytes"] == doc["delta_bytes"]
    assert ex["unexplained_bytes"] == ex["measured_delta_bytes"] - ex["estimated_delta_bytes"]
    assert ex["verdict"] == ("explained" if abs(ex["unexplained_bytes"]) <= ex["tolerance_bytes"] else "unexplained")
    # the order of the four files does not matter within a kind's pair
    again = invoke_json(
        HELPER, _path("g01_base.sh"), G01, _path("g05_mbs2.sh"), G05, "--gpus", "1", "--json", codes=(1,)
    )
    assert again["explanation"] == ex


def test_unmodelled_knob_is_the_candidate_for_an_unexplained_change(tmp_path: Path) -> None:
    """Measured: c01 -> c07 (real H200 memory_summary texts); configs: the Mixtral pair whose only
    modelled difference is PP. The estimate cannot cover 44 GiB of measured growth, and the
    unmodelled --overlap-param-gather is named as the candidate - never priced at 0."""
    doc = invoke_json(HELPER, C01, C07, PP4, PP2, "--json", codes=(1,))
    ex = doc["explanation"]
    assert ex["verdict"] == "unmodelled-candidates" and ex["candidates"] == ["overlap_param_gather"]
    out = invoke(HELPER, C01, C07, PP4, PP2)
    assert "overlap_param_gather - the likely source" in out.stdout


# ------------------------------------------------------------------ measurement bad input
def test_mixed_kinds_are_refused() -> None:
    out = invoke(HELPER, C01, PP2)
    assert out.exit_code == 2 and "same kind" in out.stderr
    out = invoke(HELPER, C01, C07, PP4)
    assert out.exit_code == 2 and "got 3" in out.stderr


def test_text_that_is_neither_is_one_line_exit_2(tmp_path: Path) -> None:
    note = tmp_path / "notes.txt"
    note.write_text("we changed PP and it got worse\n")
    out = invoke(HELPER, str(note), C01)
    assert out.exit_code == 2 and "notes.txt" in out.stderr and "Traceback" not in out.stderr


def test_hostile_snapshot_runs_nothing(tmp_path: Path) -> None:
    import os
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    hostile = tmp_path / "snapshot.pickle"
    hostile.write_bytes(pickle.dumps(Payload(), protocol=4))  # building the bytes runs nothing
    out = invoke(HELPER, C01, str(hostile))
    assert out.exit_code == 2 and "snapshot.pickle" in out.stderr
    assert not marker.exists()


# ------------------------------------------------------------------ multi-rank logs (H200, 4 ranks)
BASE, LONGER, LEAK = (_sample("h200-runtime", f"torchrun_{n}.log") for n in ("base", "longer", "leak"))


def test_every_rank_regressed_when_the_sequence_doubles() -> None:
    doc = invoke_json(HELPER, BASE, LONGER, "--json", codes=(1,))
    assert_schema(doc)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    assert doc["regressed_ranks"] == [0, 1, 2, 3]
    assert all(r["delta_bytes"] > 2 * 2**30 for r in doc["ranks"])


def test_a_leak_on_one_rank_is_that_rank_and_is_called_a_leak() -> None:
    doc = invoke_json(HELPER, BASE, LEAK, "--json", codes=(1,))
    assert doc["regressed_ranks"] == [3]
    by = {r["rank"]: r for r in doc["ranks"]}
    assert by[3]["trend_b"] == "leak" and by[3]["trend_a"] != "leak"
    assert all(by[r]["trend_b"] != "leak" and abs(by[r]["delta_bytes"]) <= 2**20 for r in (0, 1, 2))
    # the worst rank's change is rank 3's: the leaked bytes, within the log's rounding
    assert doc["delta_bytes"] == by[3]["delta_bytes"]
    text = invoke(HELPER, BASE, LEAK).stdout
    assert "rank 3:" in text and "B leaks here" in text


def test_same_log_twice_is_no_regression() -> None:
    doc = invoke_json(HELPER, BASE, BASE, "--json")
    assert doc["regressed"] is False and doc["delta_bytes"] == 0 and doc["regressed_ranks"] == []


def test_schema_trend_enum_is_the_verdicts_own() -> None:
    from memtune.runtime.verdicts import TREND_KINDS

    schema = json.loads(SCHEMA.read_text())
    rank = schema["$defs"]["measurement"]["properties"]["ranks"]["items"]["properties"]
    assert [k for k in rank["trend_b"]["enum"] if k is not None] == list(TREND_KINDS)


# ------------------------------------------------------------------ flags as written
def test_flags_name_the_users_spelling_and_the_knob_each_moves() -> None:
    doc = invoke_json(HELPER, PP4, PP2, "--json")
    flags = {f["flag"]: f for f in doc["flags"]}
    assert flags["--pipeline-model-parallel-size"] == {
        "flag": "--pipeline-model-parallel-size",
        "before": 4,
        "after": 2,
        "status": "mapped",
        "knobs": ["pp"],
    }
    assert flags["--overlap-param-gather"]["before"] is None and flags["--overlap-param-gather"]["knobs"] == [
        "overlap_param_gather"
    ]


def test_a_flag_no_reader_maps_is_unmodelled_not_dropped(tmp_path: Path) -> None:
    """A flag that moves no spec field would vanish from the knob split; it is listed as
    unmodelled (unknown effect), while a logging flag is known to leave memory alone."""
    text = Path(PP2).read_text()
    after = tmp_path / "after.sh"
    after.write_text(
        text.replace("    --overlap-param-gather\n", "    --overlap-param-gather\n    --delay-wgrad-compute\n")
    )
    after_log = tmp_path / "after_log.sh"
    after_log.write_text(text.replace("--log-interval 1 ", "--log-interval 10 "))
    doc = invoke_json(HELPER, PP4, str(after), "--json")
    assert_schema(doc)
    flags = {f["flag"]: f for f in doc["flags"]}
    assert flags["--delay-wgrad-compute"]["status"] == "not-modelled"
    assert "--delay-wgrad-compute" in doc["unmodelled"]
    assert known_sum(doc) + doc["interaction_bytes"] == doc["delta_bytes"]
    doc = invoke_json(HELPER, PP4, str(after_log), "--json")
    flags = {f["flag"]: f for f in doc["flags"]}
    assert flags["--log-interval"]["status"] == "no-memory-effect"
    assert "--log-interval" not in doc["unmodelled"]


@pytest.mark.parametrize("build", ["yaml_bomb_unused", "yaml_deep"])
def test_hostile_yaml_side_is_one_line_exit_2(tmp_path: Path, build: str) -> None:
    import attack_inputs as attack

    config = getattr(attack, build)(tmp_path / "bridge.yaml")
    out = invoke(HELPER, str(config), str(config))
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1 and "bridge.yaml" in out.stderr


def test_a_device_is_not_a_side() -> None:
    out = invoke(HELPER, "/dev/zero", PP4)
    assert out.exit_code == 2 and "/dev/zero" in out.stderr and "regular file" in out.stderr


#: A launch line without Megatron-FSDP and the same line with it, no strategy named: what B holds
#: depends on the megatron-core release (no_shard before core_v0.18.0, optim_grads_params since).
FSDP_BASE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 128256 "
    "--use-distributed-optimizer"
)


def test_the_megatron_core_release_reads_both_lines_and_their_flags(tmp_path: Path) -> None:
    """--megatron-core-version reaches the estimate of each side and the flag-by-flag split: with
    0.17 the added --use-megatron-fsdp keeps everything whole (no_shard) and memory grows; with a
    current release it shards parameters, gradients and states, and memory falls."""
    a, b = tmp_path / "a.sh", tmp_path / "b.sh"
    a.write_text(FSDP_BASE + "\n")
    b.write_text(FSDP_BASE + " --use-megatron-fsdp\n")
    old = invoke_json(HELPER, str(a), str(b), "--megatron-core-version", "0.17", "--json")
    new = invoke_json(HELPER, str(a), str(b), "--json")
    assert_schema(old)
    assert old["delta_bytes"] > 0 > new["delta_bytes"]
    knobs = {f["flag"]: f["knobs"] for f in old["flags"]}["--use-megatron-fsdp"]
    assert "use_megatron_fsdp" in knobs


def test_the_megatron_core_release_is_refused_where_no_launch_line_reads_it(tmp_path: Path) -> None:
    out = invoke(HELPER, C01, C07, "--megatron-core-version", "0.17")
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "two measurements have none" in out.stderr
    config = tmp_path / "run.yaml"
    config.write_text("model:\n  tensor_model_parallel_size: 2\n")
    out = invoke(HELPER, str(config), str(config), "--preset", "llama3-8b", "--megatron-core-version", "0.17")
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "applies to Megatron-LM launch lines" in out.stderr
