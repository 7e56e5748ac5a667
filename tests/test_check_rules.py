"""Each MT rule fires on a real-shaped script/config (tests/data/check_env) and not on clean ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helper_cli import invoke
from memtune.check import check_rules
from memtune.readers import run_view

DATA = Path(__file__).resolve().parent / "data" / "check_env"


def check(*files: str, **kwargs) -> list[check_rules.Finding]:
    scripts = [str(DATA / f) for f in files if f.endswith(".sh")]
    configs = [str(DATA / f) for f in files if f.endswith(".yaml")]
    env_files = [str(DATA / f) for f in files if f.endswith(".env")]
    overrides = kwargs.pop("overrides", ())
    view = run_view.build(
        run_view.Inputs(scripts=scripts, configs=configs, env_files=env_files, overrides=overrides, **kwargs)
    )
    return check_rules.run_all(view)


# fixture, expected rule, severity, source line, extra Inputs
CASES = [
    ("mt001_no_expandable.sh", "MT001", "warning", 5, {}),
    ("mt002_nccl_ub.sh", "MT002", "error", 3, {}),
    ("mt002_megatron_model_config.yaml", "MT002", "error", 4, {}),
    ("mt003_cuda_graph.sh", "MT003", "error", 4, {}),
    ("mt026_ep_overlap_moe_recompute.yaml", "MT026", "error", 5, {}),
    ("mt026_fp8_delayed_moe_act.sh", "MT026", "error", 6, {}),
    ("mt026_moe_act_no_grouped_gemm.sh", "MT026", "error", 6, {}),
    ("mt026_ep_overlap_pp_no_vpp.sh", "MT026", "error", 6, {}),
    ("mt027_fsdp_connections_ckpt.sh", "MT027", "error", 2, {}),
    ("mt028_local_layernorm_recompute.sh", "MT028", "warning", 37, {}),
    ("mt029_fsdp_no_strategy.sh", "MT029", "info", 8, {}),
    ("mt029_fsdp_no_strategy.sh", "MT029", "warning", 8, {"mcore_version": "0.17.0"}),
    ("mt027_fsdp_bridge.yaml", "MT027", "error", 7, {}),
    ("mt004_cpu_offload_pp.yaml", "MT004", "error", 10, {}),
    ("mt005_vpp_divisibility.yaml", "MT005", "error", 7, {}),
    ("mt006_pp_divisibility.sh", "MT006", "error", 4, {}),
    ("mt007_equals.env", "MT007", "error", 2, {"torch_version": "2.1.2"}),
    ("mt008_only_alloc_conf.sh", "MT008", "warning", 2, {}),
    ("mt009_whitespace.env", "MT009", "warning", 1, {}),
    ("mt010_lora_no_regather.yaml", "MT010", "info", 17, {}),
    ("mt010_regather_noop.yaml", "MT010", "warning", 10, {}),
    ("mt011_offload_recompute.yaml", "MT011", "error", 7, {}),
    ("mt012_vpp_microbatches.sh", "MT012", "error", 9, {}),
    ("mt013_late_export.sh", "MT013", "warning", 4, {}),
    ("mt014_graphs_offload.yaml", "MT014", "error", 6, {}),
    ("mt015_offload_layers.yaml", "MT015", "error", 7, {}),
    ("mt016_vpp_remainder.sh", "MT016", "error", 7, {}),
    ("mt018_alloc_conf_291.env", "MT018", "warning", 1, {"torch_version": "2.9.1"}),
    ("mt019_tab.env", "MT019", "warning", 1, {}),
    ("mt020_async_ignores.env", "MT020", "info", 1, {"torch_version": "2.6"}),
    ("mt021_es_split_old_torch.env", "MT021", "warning", 1, {"torch_version": "2.3"}),
    ("mt022_world_not_divisible.sh", "MT022", "error", 11, {}),
    ("mt023_ep_experts.yaml", "MT023", "error", 11, {}),
    ("mt024_crlf.sh", "MT024", "error", 1, {}),
    ("mt025_misspelt_key.yaml", "MT025", "error", 3, {}),
]


@pytest.mark.parametrize("fixture,code,severity,line,extra", CASES, ids=[c[1] + ":" + c[0] for c in CASES])
def test_rule_fires_with_source_line(fixture: str, code: str, severity: str, line: int, extra: dict) -> None:
    findings = check(fixture, **extra)
    hits = [f for f in findings if f.rule == code]
    assert hits, [f.rule for f in findings]
    hit = hits[0]
    assert hit.severity == severity
    assert hit.source == f"{DATA / fixture}:{line}"
    assert hit.message and hit.fix


def test_every_rule_in_the_table_has_a_fixture() -> None:
    documented = set(run_view.rules_data()["rules"])
    covered = {c[1] for c in CASES} | {"MT017"}
    assert documented <= covered


@pytest.mark.parametrize(
    "files",
    [
        ("clean_megatron_sbatch.sh",),
        ("clean_bridge_lora.yaml",),
        ("clean_env.env", "clean_bridge_lora.yaml"),
    ],
)
def test_clean_inputs_have_no_error_or_warning(files: tuple[str, ...]) -> None:
    findings = check(*files, torch_version="2.8.0")
    assert [f for f in findings if f.severity in ("error", "warning")] == []


def test_mt022_mt023_use_run_specs_arithmetic_and_need_their_inputs(tmp_path: Path) -> None:
    from memtune.spec.run_spec import expert_parallel_problem, model_parallel_problem

    mt022 = next(f for f in check("mt022_world_not_divisible.sh") if f.rule == "MT022")
    assert mt022.message.startswith(model_parallel_problem(24, 4, 4, 1) + " (")
    assert "16 or 32" in mt022.fix
    mt023 = next(f for f in check("mt023_ep_experts.yaml") if f.rule == "MT023")
    assert mt023.message.startswith(expert_parallel_problem(128, 12) + " (")
    assert "--expert-model-parallel-size 8" in mt023.fix
    # a GPU count given on the command line that fits, or EP that divides: no finding
    assert not any(f.rule == "MT022" for f in check("mt022_world_not_divisible.sh", world_size=32))
    fixed = tmp_path / "ep8.yaml"
    fixed.write_text((DATA / "mt023_ep_experts.yaml").read_text().replace("parallel-size: 12", "parallel-size: 8"))
    view = run_view.build(run_view.Inputs(configs=[str(fixed)]))
    assert view.get("ep") == 8 and not any(f.rule == "MT023" for f in check_rules.run_all(view))


def test_mt021_only_before_the_fix() -> None:
    assert not any(f.rule == "MT021" for f in check("mt021_es_split_old_torch.env", torch_version="2.5"))
    unknown = [f for f in check("mt021_es_split_old_torch.env") if f.rule == "MT021"]
    assert unknown and unknown[0].severity == "info"


def test_async_backend_is_not_told_to_enable_expandable_segments() -> None:
    assert not any(f.rule == "MT001" for f in check("mt020_async_ignores.env", torch_version="2.6"))


def test_fixes_are_concrete() -> None:
    by_rule = {f.rule: f for f in check("mt003_cuda_graph.sh")}
    assert by_rule["MT003"].fix.startswith("export NCCL_GRAPH_REGISTER=0")
    by_rule = {f.rule: f for f in check("mt007_equals.env", torch_version="2.4")}
    assert "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:8000" in by_rule["MT007"].fix
    by_rule = {f.rule: f for f in check("mt005_vpp_divisibility.yaml")}
    assert "model.virtual_pipeline_model_parallel_size: 2" in by_rule["MT005"].fix  # 20 layers/rank: 2, 4, 5, 10, 20
    by_rule = {f.rule: f for f in check("mt004_cpu_offload_pp.yaml")}
    assert "model.cpu_offloading: false" in by_rule["MT004"].fix


def test_register_zero_silences_mt003() -> None:
    findings = check("mt003_cuda_graph.sh", overrides=())
    assert any(f.rule == "MT003" for f in findings)
    view = run_view.build(
        run_view.Inputs(scripts=[str(DATA / "mt003_cuda_graph.sh")], use_env=True, environ={"NCCL_GRAPH_REGISTER": "0"})
    )
    # the script does not export it; the process env does, but the script's own env wins only for what it sets
    assert not any(f.rule == "MT003" for f in check_rules.run_all(view))


def test_blackwell_needs_graph_register_only_with_transformer_engine_graphs() -> None:
    """Megatron-LM's argument checks and TECudaGraphHelper assert for Transformer Engine graphs
    on every GPU; the local implementation's guard tests ``get_device_capability()[0] < 10``."""
    te = check("mt003_cuda_graph.sh", gpu="B200")  # --cuda-graph-impl transformer_engine
    assert any(f.rule == "MT003" and "on every GPU" in f.message for f in te)
    assert any(f.rule == "MT003" for f in check("mt003_cuda_graph_local.sh", gpu="NVIDIA H100-SXM5-80GB"))
    assert not any(f.rule == "MT003" for f in check("mt003_cuda_graph_local.sh", gpu="B200"))
    with pytest.raises(Exception, match="--gpu"):
        check("mt003_cuda_graph.sh", gpu="TPU")


# The names check_env accepted from its own table before gpus.yaml became the one table,
# with the compute capability each one had there: none may be lost or change.
_OLD_CHECK_ENV_GPUS = {
    "V100": 7.0,
    "A10": 8.6,
    "A40": 8.6,
    "A100": 8.0,
    "L4": 8.9,
    "L40": 8.9,
    "L40S": 8.9,
    "H20": 9.0,
    "H100": 9.0,
    "H200": 9.0,
    "GH200": 9.0,
    "B100": 10.0,
    "B200": 10.0,
    "GB200": 10.0,
    "B300": 10.3,
    "GB300": 10.3,
}


@pytest.mark.parametrize("name, cc", sorted(_OLD_CHECK_ENV_GPUS.items()))
def test_every_gpu_name_check_env_knew_keeps_its_compute_capability(name, cc) -> None:
    view = run_view.build(run_view.Inputs(env_values=["A=1"], gpu=name))
    assert view.compute_capability == cc


@pytest.mark.parametrize(
    "name, table_name, cc",
    [
        ("H100", "H100-80GB", 9.0),
        ("H100-80GB", "H100-80GB", 9.0),
        ("h100_sxm", "H100-80GB", 9.0),
        ("NVIDIA H100 80GB HBM3", "H100-80GB", 9.0),
        ("NVIDIA H100-SXM5-80GB", "H100-80GB", 9.0),
        ("H100 NVL", "H100-NVL", 9.0),
        ("A100-40GB", "A100-40GB", 8.0),
        ("NVIDIA A100 80GB PCIe", "A100-80GB", 8.0),
        ("Tesla V100-SXM2-32GB", "V100-32GB", 7.0),
        ("GB200 NVL72", "GB200", 10.0),
        ("NVIDIA B300 SXM6 AC", "B300", 10.3),
        ("MI300X", "MI300X", 9.4),
        ("AMD Instinct MI300X", "MI300X", 9.4),
    ],
)
def test_one_gpu_table_for_every_helper(name, table_name, cc) -> None:
    """check_env and estimate/plan resolve a name to the same entry of gpus.yaml."""
    from memtune.commands.options import parse_run_options
    from memtune.commands.run_inputs import load_model_and_run
    from memtune.spec.gpus import lookup_gpu

    assert lookup_gpu(name).name == table_name
    assert run_view.build(run_view.Inputs(env_values=["A=1"], gpu=name)).compute_capability == cc
    inputs = load_model_and_run(parse_run_options(["--preset", "llama3-8b", "--gpu", name]))
    assert inputs.gpu_memory_bytes == lookup_gpu(table_name).usable_bytes
    assert any(n.startswith(f"GPU {table_name}:") for n in inputs.notes)


def test_check_rules_yaml_no_longer_keeps_its_own_gpu_table() -> None:
    assert "gpus" not in run_view.rules_data()


def test_mi300x_keeps_the_pre_blackwell_verdict_in_mt003() -> None:
    """ROCm reports gfx942 as capability 9.4, so the local implementation's `major < 10` guard applies."""
    assert any(f.rule == "MT003" for f in check("mt003_cuda_graph_local.sh", gpu="MI300X"))
    assert not any(f.rule == "MT003" for f in check("mt003_cuda_graph_local.sh", gpu="NVIDIA B300 SXM6 AC"))


def test_unknown_gpu_is_one_line_with_close_matches_in_every_helper() -> None:
    for helper, args, fallback in (
        ("check_env", ["--set", "A=1"], "leave --gpu out"),
        ("estimate_memory", ["--preset", "llama3-8b"], "--gpu-memory"),
        ("plan_memory", ["--preset", "llama3-8b"], "--gpu-memory"),
    ):
        result = invoke(helper, *args, "--gpu", "MI300")
        assert result.returncode == 2 and result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr
        assert "--gpu 'MI300': unknown GPU; did you mean MI300X" in lines[0] and fallback in lines[0]


def test_guard_blind_spot_is_called_out() -> None:
    """Whitespace: PyTorch enables expandable segments, Megatron's text guard misses it."""
    view = run_view.build(
        run_view.Inputs(
            use_env=True,
            environ={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments: True"},
            overrides=["model.cuda_graph_impl=local"],
            torch_version="2.8",
        )
    )
    findings = {f.rule: f for f in check_rules.run_all(view)}
    assert "MT009" in findings
    assert "will not stop the run" in findings["MT003"].message


def test_overrides_win_over_yaml() -> None:
    findings = check("mt004_cpu_offload_pp.yaml", overrides=["model.pipeline_model_parallel_size=1"])
    assert not any(f.rule == "MT004" for f in findings)
    findings = check("mt005_vpp_divisibility.yaml", overrides=["~model.virtual_pipeline_model_parallel_size"])
    assert not any(f.rule == "MT005" for f in findings)


def test_world_size_needed_for_mt012_is_asked_for() -> None:
    findings = check("mt005_vpp_divisibility.yaml")
    info = [f for f in findings if f.rule == "MT012"]
    assert info and info[0].severity == "info" and "world size" in info[0].fix
    findings = check(
        "mt005_vpp_divisibility.yaml", world_size=32, overrides=["model.virtual_pipeline_model_parallel_size=5"]
    )
    assert not any(f.rule == "MT012" for f in findings)  # GBS 32 / DP 2 = 16 micro-batches >= 4


def test_mcore_version_gates_old_interleaved_rule() -> None:
    old = check("mt016_vpp_remainder.sh", mcore_version="0.9")
    assert any(f.rule == "MT012" and f.severity == "error" for f in old)
    new = check("mt016_vpp_remainder.sh", mcore_version="0.14")
    assert not any(f.rule == "MT012" for f in new)


def test_findings_sorted_errors_first() -> None:
    findings = check("mt016_vpp_remainder.sh")
    ranks = [check_rules.SEVERITY_ORDER[f.severity] for f in findings]
    assert ranks == sorted(ranks)


def run_cli(*args: str):
    return invoke("check_env", *args)


def test_cli_json_and_exit_codes() -> None:
    bad = run_cli("--script", str(DATA / "mt002_nccl_ub.sh"), "--json")
    assert bad.returncode == 1, bad.stderr
    document = json.loads(bad.stdout)
    assert set(document) == {"findings", "notes"}
    assert all(set(f) == {"rule", "severity", "message", "fix", "source"} for f in document["findings"])
    clean = run_cli("--script", str(DATA / "clean_megatron_sbatch.sh"), "--torch-version", "2.8")
    assert clean.returncode == 0, clean.stdout
    assert "0 error(s)" in clean.stdout


def test_cli_text_grouped_by_severity() -> None:
    result = run_cli("--script", str(DATA / "mt016_vpp_remainder.sh"))
    out = result.stdout
    assert out.index("ERRORS") < out.index("WARNINGS") < out.index("INFO")


@pytest.mark.parametrize(
    "args,needle",
    [
        ((), "nothing to check"),
        (("--script", "/no/such/file.sh"), "No such file"),
        (("--config", str(DATA / "mt007_equals.env")), "not a mapping"),
        (("--env-file", str(DATA / "mt004_cpu_offload_pp.yaml")), "expected KEY=VALUE"),
        (("--script", str(DATA / "clean_megatron_sbatch.sh"), "--torch-version", "newest"), "--torch-version"),
        (("--config", str(DATA / "clean_bridge_lora.yaml"), "model.tp"), "not KEY=VALUE"),
        (("--set", "no-equals-sign"), "expected NAME=VALUE"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args: tuple[str, ...], needle: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert needle in result.stderr


def test_no_false_errors_on_real_megatron_lm_runs(tmp_path: Path) -> None:
    """54 Megatron-LM functional tests that ran to completion on 8 H100s (their model_config
    flags and environment, tests/data/estimator/megatron-lm-calibration.json): no rule may
    call any of them an error."""
    import yaml

    runs = json.loads(
        (Path(__file__).resolve().parent / "data" / "estimator" / "megatron-lm-calibration.json").read_text()
    )
    runs = runs["runs"] if isinstance(runs, dict) else runs
    assert len(runs) >= 50
    checked = 0
    for run in runs:
        path = tmp_path / f"{run['case']}.yaml"
        path.write_text(yaml.safe_dump({"ENV_VARS": run.get("env", {}), "MODEL_ARGS": run["megatron_args"]}))
        view = run_view.build(run_view.Inputs(configs=[str(path)], world_size=run["world_size"]))
        errors = [f for f in check_rules.run_all(view) if f.severity == "error"]
        assert errors == [], (run["case"], errors)
        checked += 1
    assert checked == len(runs)


def test_cli_set_checks_a_single_value() -> None:
    result = run_cli("--set", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:true", "--torch-version", "2.9.1", "--json")
    assert result.returncode == 1
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["rule"] == "MT007" and "ValueError: Expected 'True' or 'False'" in finding["message"]
    assert finding["source"] == "--set PYTORCH_CUDA_ALLOC_CONF"


@pytest.mark.parametrize(
    "fixture,version",
    [
        ("mt001_no_expandable.sh", "2.3"),
        ("mt001_no_expandable.sh", "2.8"),
        ("mt007_equals.env", "2.1"),
        ("mt009_whitespace.env", "2.8"),
        ("mt019_tab.env", None),
        ("mt021_es_split_old_torch.env", "2.3"),
    ],
)
def test_suggested_allocator_strings_are_accepted_and_clean(fixture: str, version: str | None) -> None:
    """The value a fix tells the user to export passes PyTorch and triggers no allocator rule again."""
    from memtune.readers import alloc_conf as ac

    findings = check(fixture, torch_version=version)
    fixes = [f.fix for f in findings if f.fix.startswith("export PYTORCH_CUDA_ALLOC_CONF=")]
    assert fixes
    for fix in fixes:
        value = fix.split("=", 1)[1].split()[0]
        parsed = ac.parse(value, ac.parse_version(version))
        syntax_only = fixture.startswith("mt007")  # MT007 repairs the syntax, keeping the user's options
        assert parsed.accepted and (syntax_only or parsed.expandable_segments), (fixture, value)
        view = run_view.build(run_view.Inputs(env_values=[f"PYTORCH_CUDA_ALLOC_CONF={value}"], torch_version=version))
        again = {f.rule for f in check_rules.run_all(view)}
        assert again <= {"MT017", "MT008"} | ({"MT001"} if syntax_only else set()), (fixture, value, again)


def test_crlf_script_reports_what_bash_exports(tmp_path) -> None:
    hit = next(f for f in check("mt024_crlf.sh") if f.rule == "MT024")
    assert "'expandable_segments:True\\r'" in hit.message
    assert "Expected a single True/False argument for expandable_segments" in hit.message
    assert "sed -i" in hit.fix


def test_crlf_without_exports_and_lf_scripts(tmp_path) -> None:
    crlf = tmp_path / "plain.sh"
    crlf.write_bytes(b"#!/bin/bash\nexport NCCL_DEBUG=INFO\r\ntorchrun train.py\r\n")
    view = run_view.build(run_view.Inputs(scripts=[str(crlf)]))
    hits = [f for f in check_rules.run_all(view) if f.rule == "MT024"]
    assert len(hits) == 1 and hits[0].source == f"{crlf}:2" and "'INFO\\r'" in hits[0].message
    crlf.write_bytes(crlf.read_bytes().replace(b"\r\n", b"\n"))
    view = run_view.build(run_view.Inputs(scripts=[str(crlf)]))
    assert not [f for f in check_rules.run_all(view) if f.rule == "MT024"]


def test_malformed_allocator_string_does_not_hide_the_rules_that_depend_on_it() -> None:
    """Issue 11 item 8: `expandable_segments:true,...` is rejected (MT007), and the run is
    judged as the user meant it (True): NCCL UB (MT002) and the missing
    NCCL_GRAPH_REGISTER=0 (MT003) are reported in the same run, not after a fix-and-rerun."""
    findings = check("mt007_mt002_mt003_one_pass.sh")
    errors = [f.rule for f in findings if f.severity == "error"]
    # (the script's Megatron-FSDP also exports CUDA_DEVICE_MAX_CONNECTIONS=1 and keeps the default
    # checkpoint format: MT027 twice)
    assert errors == ["MT007", "MT002", "MT003", "MT027", "MT027"]
    by_rule = {f.rule: f for f in findings}
    assert by_rule["MT007"].fix == "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:512"
    for code in ("MT002", "MT003"):
        assert by_rule[code].source.endswith("mt007_mt002_mt003_one_pass.sh:4")
        assert "read as 'expandable_segments:True,max_split_size_mb:512' once MT007 is fixed" in by_rule[code].message
    # the guard note is about the corrected text, which Megatron's literal check does see
    assert "will not stop the run" not in by_rule["MT003"].message
    # and the key next to it is judged too: max_split_size_mb is moot with expandable segments
    assert any(f.rule == "MT020" and "max_split_size_mb" in f.message for f in findings)


def test_an_uncorrectable_string_still_hides_nothing_it_cannot_read(tmp_path) -> None:
    """When the correction is not accepted either, nothing is assumed about the intent."""
    script = tmp_path / "launch.sh"
    script.write_text(
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe,bogus_option:1\n"
        "torchrun pretrain_gpt.py --use-nccl-ub --num-layers 32\n"
    )
    view = run_view.build(run_view.Inputs(scripts=[str(script)], torch_version="2.8"))
    rules = [f.rule for f in check_rules.run_all(view)]
    assert "MT007" in rules and "MT002" not in rules


@pytest.mark.parametrize(
    "value,moot",
    [
        ("expandable_segments:True,max_split_size_mb:512", ["max_split_size_mb"]),
        ("expandable_segments:True,garbage_collection_threshold:0.6", ["garbage_collection_threshold"]),
        ("expandable_segments:True,release_lock_on_cudamalloc:True", ["release_lock_on_cudamalloc"]),
        ("expandable_segments:True,roundup_power2_divisions:4", []),
        ("expandable_segments:True,pinned_use_cuda_host_register:True", []),
        ("expandable_segments:False,max_split_size_mb:512", []),
    ],
)
def test_keys_combined_with_expandable_segments_are_judged(value: str, moot: list[str], tmp_path) -> None:
    env = tmp_path / "a.env"
    env.write_text(f"PYTORCH_CUDA_ALLOC_CONF={value}\n")
    view = run_view.build(run_view.Inputs(env_files=[str(env)], torch_version="2.8"))
    notes = [f.message for f in check_rules.run_all(view) if f.rule == "MT020"]
    assert [
        k
        for k in ("max_split_size_mb", "garbage_collection_threshold", "release_lock_on_cudamalloc")
        if any(k in n for n in notes)
    ] == moot


def test_mt002_is_a_warning_from_pytorch_2_11() -> None:
    """Megatron-Core's check became ``if self.nccl_ub and not is_torch_min_version("2.11.0a0")``
    (May 2026): an error when the release is older or unknown, a warning from 2.11 on."""
    for version, severity in ((None, "error"), ("2.10", "error"), ("2.11", "warning"), ("2.12.1", "warning")):
        kwargs = {"torch_version": version} if version else {}
        found = [f for f in check("mt002_nccl_ub.sh", **kwargs) if f.rule == "MT002"]
        assert [f.severity for f in found] == [severity], version
        if severity == "warning":
            assert "before PyTorch 2.11" in found[0].message and version in found[0].message


def test_mt026_stays_quiet_on_the_nearest_legal_settings() -> None:
    """An fp8 recipe other than delayed, the inner moe_act module under EP overlap, or the overlap
    off: Megatron-Core starts, so no MT026."""
    legal = [
        ("mt026_fp8_delayed_moe_act.sh", ("model.fp8_recipe=tensorwise",)),
        ("mt026_ep_overlap_moe_recompute.yaml", ("model.recompute_modules=[moe_act]",)),
        ("mt026_ep_overlap_moe_recompute.yaml", ("comm_overlap.overlap_moe_expert_parallel_comm=false",)),
    ]
    for fixture, overrides in legal:
        assert not any(f.rule == "MT026" for f in check(fixture, overrides=overrides)), (fixture, overrides)
    refused = [f for f in check("mt026_fp8_delayed_moe_act.sh") if f.rule == "MT026"]
    assert len(refused) == 1 and "fp8 delayed" in refused[0].message and "tensorwise" in refused[0].fix
    no_gg = [f for f in check("mt026_moe_act_no_grouped_gemm.sh") if f.rule == "MT026"]
    assert len(no_gg) == 1 and "moe_grouped_gemm" in no_gg[0].message and "--moe-grouped-gemm" in no_gg[0].fix


def test_mt028_names_the_module_and_keeps_the_others_in_its_fix(tmp_path: Path) -> None:
    """The measured r02 launch line (layernorm recompute, local transformer, no TE: NameError at
    the first step) fires; core_attn / mlp, or the Transformer Engine spec, stay quiet."""
    found = [f for f in check("mt028_local_layernorm_recompute.sh") if f.rule == "MT028"]
    assert len(found) == 1
    assert "layernorm" in found[0].message and "FP8GlobalStateManager" in found[0].message
    assert "core_attn, mlp" in found[0].fix and "Transformer Engine" in found[0].fix
    text = (DATA / "mt028_local_layernorm_recompute.sh").read_text()

    def mt028(old: str, new: str) -> list[check_rules.Finding]:
        path = tmp_path / "variant.sh"
        path.write_text(text.replace(old, new))
        view = run_view.build(run_view.Inputs(scripts=[str(path)]))
        return [f for f in check_rules.run_all(view) if f.rule == "MT028"]

    both = mt028("--recompute-modules layernorm", "--recompute-modules core_attn layernorm")
    assert len(both) == 1 and both[0].fix.startswith("--recompute-modules core_attn")
    for old, new in (
        ("--recompute-modules layernorm", "--recompute-modules core_attn mlp"),
        ("--transformer-impl local", "--transformer-impl transformer_engine"),
        ("--recompute-granularity selective", "--recompute-granularity full"),
    ):
        assert not mt028(old, new), new
    bridge = tmp_path / "bridge.yaml"
    local_spec = (
        "  transformer_layer_spec: {_call_: false, _target_: megatron.bridge.models.gpt_provider.local_layer_spec}\n"
    )
    modules = (
        "  recompute_granularity: selective\n  recompute_modules: [mla_up_proj, moe_act, gdn_norm_out, layernorm]\n"
    )

    def bridge_mt028(model_lines: str) -> list[check_rules.Finding]:
        bridge.write_text("model:\n" + model_lines + modules)
        view = run_view.build(run_view.Inputs(configs=[str(bridge)]))
        return [f for f in check_rules.run_all(view) if f.rule == "MT028"]

    # Bridge picks the layer spec with transformer_layer_spec, not transformer_impl
    yaml_found = bridge_mt028(local_spec)
    # mla_up_proj passes fp8=None without FP8 and moe_act's checkpoint is TE-only: not named
    assert len(yaml_found) == 1 and "modules layernorm, gdn_norm_out (" in yaml_found[0].message
    assert not bridge_mt028("  transformer_impl: local\n")
    assert not bridge_mt028(local_spec.replace("local_layer_spec", "default_layer_spec"))


def test_mt027_names_each_megatron_fsdp_check_and_stays_quiet_when_met() -> None:
    found = [f for f in check("mt027_fsdp_connections_ckpt.sh") if f.rule == "MT027"]
    assert len(found) == 2
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in found[0].message and "torch_dist" in found[1].message
    assert found[1].fix.startswith("--ckpt-format fsdp_dtensor")
    assert not any(
        f.rule == "MT027" for f in check("mt027_fsdp_bridge.yaml", overrides=("checkpoint.ckpt_format=fsdp_dtensor",))
    )
    # Bridge checks the format only when the run saves or loads
    assert not any(f.rule == "MT027" for f in check("mt027_fsdp_bridge.yaml", overrides=("~checkpoint.save",)))
    # a format the job fills in is not judged
    assert not any(
        f.rule == "MT027" and "format" in f.message
        for f in check("mt027_fsdp_bridge.yaml", overrides=("checkpoint.ckpt_format=${FMT}",))
    )
    # FSDP off: nothing to check
    assert not any(
        f.rule == "MT027" for f in check("mt027_fsdp_bridge.yaml", overrides=("ddp.use_megatron_fsdp=false",))
    )


def test_mt026_ep_overlap_needs_virtual_stages_only_with_a_pipeline() -> None:
    found = [f for f in check("mt026_ep_overlap_pp_no_vpp.sh") if f.rule == "MT026"]
    assert len(found) == 1 and "virtual pipeline stages" in found[0].message
    assert found[0].message.startswith("overlap_moe_expert_parallel_comm (")
    interleaved = ("model.virtual_pipeline_model_parallel_size=2",)
    assert not any(f.rule == "MT026" for f in check("mt026_ep_overlap_pp_no_vpp.sh", overrides=interleaved))
