"""Every helper's --json output against its published schema, and the reference page.

The schemas in scripts/memtune/data/schemas/output/ are the contract agents parse against:
real output of each helper on its test inputs must validate (additional properties are
refused, so a new field without a documented meaning fails here), every field must say what
it means, and references/json-output.md must be exactly what the generator renders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from helper_cli import invoke_json
from memtune.release import json_reference as ref
from run_flags import DEEPSEEK_V3_1024, LLAMA2_13B_16_A100_40, flags

SCHEMAS = REPO_ROOT / "scripts" / "memtune" / "data" / "schemas" / "output"
CHECK_ENV_DATA = REPO_ROOT / "tests" / "data" / "check_env"


def validator(name: str):
    import jsonschema

    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def assert_valid(name: str, doc: dict) -> None:
    errors = sorted(validator(name).iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, [f"{name}: {list(e.absolute_path)}: {e.message}" for e in errors[:5]]


# ------------------------------------------------------------- the schemas themselves
@pytest.mark.parametrize("name", [n for n, _ in ref.load_schemas()])
def test_schema_is_draft_2020_12_and_every_field_is_described(name):
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator(name)  # check_schema raises on an invalid schema
    assert schema.get("description") and schema.get("title")
    assert ref.undocumented(schema) == []


def test_every_helper_with_json_output_has_a_schema():
    names = {n for n, _ in ref.load_schemas()}
    assert {
        "plan_memory",
        "estimate_memory",
        "check_env",
        "regather_config",
        "sign_skill",
        "lint_skill",
        "run_benchmark",
        "list_presets",
        "runtime_memory",
    } <= names


def test_units_are_stated_for_bytes_and_fractions():
    for name, schema in ref.load_schemas():
        for path, _, meaning in ref.rows(schema):
            leaf = path.rsplit(".", 1)[-1]
            if leaf.endswith("_bytes") or leaf.endswith("_bytes_per_gpu"):
                assert "bytes" in meaning, (name, path)
            if "throughput_change" in leaf:
                assert "fraction" in meaning, (name, path)
        for def_name, definition in schema.get("$defs", {}).items():
            for path, _, meaning in ref.rows(definition):
                if path.endswith("_bytes"):
                    assert "bytes" in meaning, (name, def_name, path)
                if "throughput_change" in path:
                    assert "fraction" in meaning, (name, def_name, path)


# ------------------------------------------------------------- real outputs
@pytest.mark.parametrize(
    "args",
    [
        ("--example",),
        ("--example", "--sweep", "--top", "5"),
        ("--example", "--expandable-segments", "on"),
        flags(preset="llama3-70b", gpus=8, tp=8, mbs=1, gbs=8, seq_length=4096, gpu_memory="16GiB"),  # nothing fits
        (*LLAMA2_13B_16_A100_40, "--sweep"),
    ],
    ids=["example", "sweep", "expandable-on", "nothing-fits", "13b-sweep"],
)
def test_plan_memory_output_validates(args):
    assert_valid("plan_memory", invoke_json("plan_memory", *args, "--json"))


@pytest.mark.parametrize(
    "args",
    [
        ("--example",),
        (*DEEPSEEK_V3_1024, *flags(sequence_parallel=True, dist_opt=True, gpu_memory="80GiB")),
        ("--preset", "qwen3-8b", "--gpus", "2", "--tp", "2", "--sequence-parallel", "--peft", "lora", "--regather"),
    ],
    ids=["example", "deepseek-v3", "no-gpu-memory"],
)
def test_estimate_memory_output_validates(args):
    assert_valid("estimate_memory", invoke_json("estimate_memory", *args, "--json"))


@pytest.mark.parametrize("helper", ["estimate_memory", "plan_memory"])
def test_list_presets_output_validates(helper):
    assert_valid("list_presets", invoke_json(helper, "--list-presets", "--json"))


def _check_env_inputs() -> list[tuple[str, ...]]:
    out = []
    for path in sorted(CHECK_ENV_DATA.iterdir()):
        flag = {".sh": "--script", ".yaml": "--config", ".env": "--env-file"}.get(path.suffix)
        if flag:
            out.append((flag, str(path)))
    return out


@pytest.mark.parametrize("args", _check_env_inputs(), ids=lambda a: Path(a[1]).name)
def test_check_env_output_validates(args):
    assert_valid("check_env", invoke_json("check_env", *args, "--json", codes=(0, 1)))


@pytest.mark.parametrize(
    "args",
    [
        ("--preset", "qwen3-8b", "--tp", "2", "--seq-length", "8192"),
        ("--config", str(CHECK_ENV_DATA / "mt010_lora_no_regather.yaml")),
        ("--config", str(CHECK_ENV_DATA / "mt010_regather_noop.yaml")),
        ("--config", str(CHECK_ENV_DATA / "clean_bridge_lora.yaml"), "--form", "python"),
    ],
    ids=["preset", "no-regather", "noop", "python-form"],
)
def test_regather_config_output_validates(args):
    assert_valid("regather_config", invoke_json("regather_config", *args, "--json", codes=(0, 1)))


@pytest.mark.usefixtures("cached_security_scan")  # the scan answers the lint tests already computed
def test_lint_skill_output_validates():
    assert_valid("lint_skill", invoke_json("lint_skill", "--json", codes=(0, 1)))


def test_sign_skill_verify_output_validates():
    # the committed signature may be stale on a branch with changes: a failed verify is a
    # document too (exit 1), and must match the schema as well as a passing one
    assert_valid("sign_skill", invoke_json("sign_skill", "verify", str(REPO_ROOT), "--json", codes=(0, 1)))


def test_sign_skill_verify_failures_validate():
    # the two refusals issue 16 added: a trust anchor other than the expected one, and bytecode
    mismatch = invoke_json(
        "sign_skill", "verify", str(REPO_ROOT), "--json", "--expect-fingerprint", "AA:" * 31 + "AA", codes=(1,)
    )
    assert mismatch["failure"]["kind"] == "anchor-mismatch" and mismatch["trust_anchor"]["matches_expected"] is False
    assert_valid("sign_skill", mismatch)


def test_run_benchmark_validate_output_validates():
    assert_valid("run_benchmark", invoke_json("run_benchmark", "validate", "--json"))


def test_run_benchmark_run_output_validates(tmp_path):
    fake = f"command:{sys.executable} {REPO_ROOT / 'tests' / 'bench_fake_agent.py'}"
    doc = invoke_json(
        "run_benchmark",
        "run",
        "--agent",
        fake,
        "--attempts",
        "1",
        "--workers",
        "1",
        "--cases",
        "frag-first-fix",
        "--run-id",
        "schema",
        "--results-dir",
        str(tmp_path),
        "--json",
    )
    assert_valid("run_benchmark", doc)


# ------------------------------------------------------------- the schemas can fail
def test_an_undocumented_field_or_a_percent_fails_validation():
    doc = invoke_json("plan_memory", "--example", "--json", "--top", "2")
    assert_valid("plan_memory", doc)
    extra = json.loads(json.dumps(doc))
    extra["ranked"][0]["new_field"] = 1
    assert list(validator("plan_memory").iter_errors(extra))
    percent = json.loads(json.dumps(doc))
    percent["ranked"][0]["throughput_change"] = "-5.9%"
    assert list(validator("plan_memory").iter_errors(percent))
    kind = json.loads(json.dumps(doc))
    kind["ladder"]["rungs"][0]["evidence_kind"] = "guess"
    assert list(validator("plan_memory").iter_errors(kind))


# ------------------------------------------------------------- the reference page
def test_reference_page_is_generated_from_the_schemas():
    page = (REPO_ROOT / "references" / "json-output.md").read_text(encoding="utf-8")
    assert page == ref.render(ref.load_schemas()), (
        "references/json-output.md is stale: run python3 scripts/memtune/release/json_reference.py"
    )


def test_reference_page_names_every_field_of_every_schema():
    page = (REPO_ROOT / "references" / "json-output.md").read_text(encoding="utf-8")
    for name, schema in ref.load_schemas():
        assert f"{name}.schema.json" in page
        for path, _, meaning in ref.rows(schema):
            assert f"`{path}`" in page and " ".join(meaning.split())[:40].replace("|", "\\|") in page


def test_generator_check_mode_reports_drift(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ref, "PAGE", tmp_path / "json-output.md")
    assert ref.main(["--check"]) == 1  # missing page is stale
    assert ref.main([]) == 0 and ref.main(["--check"]) == 0
    (tmp_path / "json-output.md").write_text("edited by hand\n")
    capsys.readouterr()
    assert ref.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert err == "json_reference.py: json-output.md is stale: run python3 scripts/memtune/release/json_reference.py\n"
    assert (tmp_path / "json-output.md").read_text() == "edited by hand\n"  # --check writes nothing


def test_generator_bad_arguments_are_one_line_exit_2(capsys):
    assert ref.main(["--chek"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--chek" in err and err.startswith("json_reference.py: error:")


def test_a_new_schema_in_the_folder_is_picked_up(tmp_path):
    (tmp_path / "diagnose.schema.json").write_text(
        json.dumps(
            {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "diagnose.py --json",
                "description": "d",
                "type": "object",
                "properties": {"verdict": {"type": "string", "description": "fragmentation or capacity"}},
                "required": ["verdict"],
            }
        )
    )
    text = ref.render(ref.load_schemas(tmp_path))
    assert "## `diagnose.py --json`" in text and "| `verdict` | string | fragmentation or capacity |" in text
