"""Hostile and oversized inputs end in one line and exit 2, quickly and in bounded memory.

Each case builds its attack input (tests/attack_inputs.py) and runs the real helper in a
fresh interpreter under a 1 GiB address-space cap (tests/bounded_run.py): before the
bounds, each of these either hung, raised MemoryError/RecursionError with a traceback, or
needed gigabytes. Timing figures live in benchmarks/input_bounds.py, not here.
"""

from __future__ import annotations

import ast
import sys

import pytest
import yaml

import attack_inputs as attack
from bounded_run import run_bounded
from memtune.estimate.regather import SourceSegments, find_lora_calls, find_recipe_settings
from memtune.files import yaml_guard

TIMEOUT = 60  # a hang shows up as a failure, not a stuck suite


def assert_one_line_exit_2(result, *expected: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr


# --------------------------------------------------------------------------- YAML aliases and depth


@pytest.mark.slow
@pytest.mark.parametrize("build", [attack.yaml_bomb_in_peft, attack.yaml_bomb_unused])
@pytest.mark.parametrize(
    "helper, extra",
    [
        ("check_env", ()),
        ("regather_config", ()),
        ("estimate_memory", ("--preset", "llama3-8b", "--gpus", "8")),
    ],
)
def test_yaml_alias_bomb_in_a_bridge_config(tmp_path, build, helper, extra):
    config = build(tmp_path / "bridge.yaml")
    result = run_bounded(helper, *extra, "--config", str(config), timeout=TIMEOUT)
    assert_one_line_exit_2(result, str(config), "aliases")


@pytest.mark.slow
@pytest.mark.parametrize(
    "helper, extra", [("check_env", ()), ("estimate_memory", ("--preset", "llama3-8b", "--gpus", "8"))]
)
def test_yaml_nested_100k_levels(tmp_path, helper, extra):
    config = attack.yaml_deep(tmp_path / "deep.yaml")
    result = run_bounded(helper, *extra, "--config", str(config), timeout=TIMEOUT)
    assert_one_line_exit_2(result, "nested deeper than")


@pytest.mark.slow
def test_deep_json_as_megatron_args(tmp_path):
    flags = attack.json_deep(tmp_path / "flags.json")
    result = run_bounded("estimate_memory", "--megatron-args", str(flags), timeout=TIMEOUT)
    assert_one_line_exit_2(result, "nested deeper than")
    flags.write_text('{"--num-layers": ' + "[" * attack.NESTING + "]" * attack.NESTING + "}")
    result = run_bounded("estimate_memory", "--megatron-args", str(flags), timeout=TIMEOUT)
    assert_one_line_exit_2(result, "nested too deeply")


def test_yaml_guard_loads_real_configs_like_safe_load(repo_root):
    configs = sorted((repo_root / "scripts" / "memtune" / "data").rglob("*.yaml"))
    assert len(configs) > 5
    for path in configs:
        text = path.read_text(encoding="utf-8")
        assert yaml_guard.safe_load(text) == yaml.safe_load(text), path


def test_yaml_guard_counts_every_use_of_an_alias():
    shared = "a: &a [1, 2, 3]\nb: [*a, *a, *a]\n"
    yaml_guard.check_node(yaml.compose(shared))  # small: fine
    with pytest.raises(yaml_guard.YamlLimitError, match="aliases"):
        yaml_guard.check_node(yaml.compose(shared), max_nodes=12)


def test_yaml_guard_refuses_a_recursive_alias():
    with pytest.raises(yaml_guard.YamlLimitError, match="refers to itself"):
        yaml_guard.safe_load("a: &a [1, *a]\n")


def test_yaml_guard_depth_bound_is_exact():
    yaml_guard.safe_load("[" * 64 + "]" * 64)
    with pytest.raises(yaml_guard.YamlLimitError, match="nested deeper than 64"):
        yaml_guard.safe_load("[" * 65 + "]" * 65)


# --------------------------------------------------------------------------- size limits


@pytest.mark.slow
@pytest.mark.parametrize(
    "helper, option, extra",
    [
        ("check_env", "--script", ()),
        ("check_env", "--env-file", ()),
        ("check_env", "--config", ()),
        ("estimate_memory", "--hf-config", ("--gpus", "8")),
        ("estimate_memory", "--megatron-args", ("--gpus", "8")),
        ("regather_config", "--recipe", ()),
    ],
)
@pytest.mark.parametrize("source", ["/dev/zero", "big"])
def test_inputs_have_a_size_limit(tmp_path, helper, option, extra, source):
    path = "/dev/zero" if source == "/dev/zero" else str(attack.oversized(tmp_path / "big.txt"))
    result = run_bounded(helper, option, path, *extra, timeout=TIMEOUT)
    assert_one_line_exit_2(result, path, "larger than the 2 MiB limit")


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--signature", "--root-cert"])
def test_signing_inputs_have_a_size_limit(option):
    result = run_bounded("sign_skill", "verify", option, "/dev/zero", timeout=TIMEOUT)
    assert_one_line_exit_2(result, "/dev/zero", "larger than the 2 MiB limit")


@pytest.mark.slow
def test_signature_nested_100k_levels(tmp_path):
    signature = attack.json_deep(tmp_path / "skill.oms.sig")
    result = run_bounded("sign_skill", "verify", "--signature", str(signature), timeout=TIMEOUT)
    assert_one_line_exit_2(result, "nested too deeply")


# --------------------------------------------------------------------------- launch-script expansion


@pytest.mark.slow
@pytest.mark.parametrize("build", [attack.doubling_script, attack.self_appending_array])
@pytest.mark.parametrize(
    "helper, extra", [("check_env", ("--script",)), ("estimate_memory", ("--gpus", "8", "--megatron-args"))]
)
def test_launch_script_expansion_is_bounded(tmp_path, build, helper, extra):
    script = build(tmp_path / "launch.sh")
    result = run_bounded(helper, *extra, str(script), timeout=TIMEOUT)
    assert_one_line_exit_2(result, "expansion too large", str(script))


# --------------------------------------------------------------------------- long recipes


@pytest.mark.slow
def test_long_recipe_is_read_in_linear_time(tmp_path):
    """Was 118-146 s (ast.get_source_segment per node re-splits the source)."""
    recipe = attack.long_recipe(tmp_path / "recipe.py")
    result = run_bounded("regather_config", "--recipe", str(recipe), timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert "linear_qkv" in result.stdout
    assert len(find_recipe_settings(str(recipe))) == 5000
    assert find_lora_calls(str(recipe))[0].target == "cfg.peft"


SEGMENT_SOURCE = (
    "cfg.peft = LoRA(\r\n    dim=16,  # ü\r\n    target_modules=['linear_qkv',\n 'linear_fc1'],\r"
    "    alpha=ü_scale * 2,\n)\nx = {'é': 'ß'}; y = f(a,\n  b)\n\x0cz = 1\n"
)


def test_source_segments_match_the_stdlib():
    tree = ast.parse(SEGMENT_SOURCE)
    segment = SourceSegments(SEGMENT_SOURCE)
    nodes = [n for n in ast.walk(tree) if hasattr(n, "lineno")]
    assert len(nodes) > 20
    for node in nodes:
        assert segment(node) == ast.get_source_segment(SEGMENT_SOURCE, node), ast.dump(node)


@pytest.mark.slow
def test_bounded_runner_reports_memory():
    result = run_bounded("estimate_memory", "--help", timeout=TIMEOUT)
    assert result.returncode == 0 and 1 < result.peak_rss_mb < 500, result
    assert sys.platform.startswith("linux")


# --------------------------------------------------------------------------- card.yaml in the lint


@pytest.mark.slow
@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda path: attack.yaml_bomb_unused(path), "aliases"),
        (lambda path: attack.yaml_deep(path, key="title"), "nested deeper than"),
    ],
)
def test_lint_reports_a_hostile_card_yaml_as_a_finding(tmp_path, build, expected):
    from lint_helpers import copy_package

    package = copy_package(tmp_path)
    build(package / "card.yaml")
    result = run_bounded("lint_skill", str(package), "--json", "--no-skills-ref", timeout=TIMEOUT)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    import json

    findings = [f for f in json.loads(result.stdout)["findings"] if f["rule"] == "card/card-yaml-too-big"]
    assert len(findings) == 1 and expected in findings[0]["message"]
