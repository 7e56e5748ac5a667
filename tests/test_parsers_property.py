"""Random text into every parser: never a traceback; bad input is exit 2 with one line.

Parsers: the allocator config (every release), the launch-script reader, Hydra overrides,
Bridge YAML, env files, and the two CLIs end to end (in-process, through memtune.cli.run,
so an unexpected exception fails the test instead of being hidden).
"""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtune import cli
from memtune.commands import check_env, regather_config
from memtune.readers import alloc_conf as ac
from memtune.readers import run_view
from memtune.readers.launch.args import parse_override, split_program_args
from memtune.readers.launch.commands import parse_text

SHELL_PIECES = [
    "export ",
    "PYTORCH_CUDA_ALLOC_CONF=",
    "PYTORCH_ALLOC_CONF=",
    "expandable_segments:True",
    "NCCL_GRAPH_REGISTER=0",
    "\\\n",
    "'",
    '"',
    "$(",
    ")",
    "${",
    "}",
    "$X",
    "${A[@]}",
    "A=(",
    "<<EOF\n",
    "EOF\n",
    "<<-'X'\n",
    "\n",
    ";",
    "|",
    "&&",
    "&",
    "#",
    "#SBATCH --nodes=2\n",
    "`",
    "(",
    " ",
    "\t",
    "srun ",
    "torchrun --nproc_per_node 8 ",
    "python -m torch.distributed.run ",
    "python ",
    "bash -c ",
    "train.py ",
    "-m mod ",
    "--use-nccl-ub ",
    "--cuda-graph-impl local ",
    "--num-layers 33 ",
    "--pipeline-model-parallel-size 4 ",
    "-tp 2 ",
    "-vp ",
    "+peft=lora ",
    "++a.b=[1,2] ",
    "~model.x ",
    "model.cpu_offloading=true ",
    "2>&1 ",
    "> log ",
    "unset X\n",
    "set -a\n",
    "declare -x B=1\n",
    "env C=1 ",
    "$'\\n'",
    "é",
    "\x00",
    "if ",
    "[[ ",
    " ]]",
    "[ ",
    " ]",
    " == ",
    " = ",
    "-z ",
    "elif ",
    "else\n",
    "fi\n",
    "then\n",
    "$((",
    "))",
    "X=$((1/0))\n",
    "A+=(",
    "B+=x ",
    "${1:-d}",
    "${A[*]}",
    "!",
]
ALLOC_PIECES = [
    "expandable_segments",
    "max_split_size_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
    "backend",
    "pinned_num_register_threads",
    ":",
    ",",
    "[",
    "]",
    ">",
    "True",
    "False",
    "true",
    "0",
    "1",
    "20",
    "64",
    "0.5",
    "-3",
    " ",
    "\t",
    "=",
    "cudaMallocAsync",
    "99999999999999999999999",
    "nan",
    "é",
]
VERSIONS = st.sampled_from(
    [(1, 10), (1, 13), (2, 0), (2, 1), (2, 2), (2, 6), (2, 8), (2, 9), (2, 9, 1), (2, 10), (2, 11), (3, 0)]
)

#: Fragments of Megatron Bridge YAML, joined at random into near-valid configs.
YAML_PIECES = [
    "model:\n",
    "  ",
    "peft:",
    " dim: 8\n",
    "- a\n",
    "[",
    "]",
    "{",
    "}",
    ": ",
    "'",
    '"',
    "num_layers: 33\n",
    "  pipeline_model_parallel_size: x\n",
    "&a ",
    "*a ",
    "!!python/object ",
    "\t",
    "---\n",
    "null\n",
    "cpu_offloading: yes\n",
]
#: Fragments of a Bridge Python recipe's PEFT setup, joined at random.
RECIPE_PIECES = [
    "cfg.peft = ",
    "LoRA(",
    "DoRA(",
    ")",
    "dim=",
    "8",
    "alpha=x",
    ",",
    "\n",
    "cfg.model.tensor_model_parallel_size = 2\n",
    "target_modules=['linear_qkv']",
    "(",
    "[",
    "\x00",
    "def f(:",
    "    ",
    "**kw",
    "sequence_parallel_input_regather=True",
]


def text_or_pieces(pieces: list[str], max_chars: int, max_pieces: int) -> st.SearchStrategy[str]:
    """Arbitrary text, or up to ``max_pieces`` of ``pieces`` joined: random text finds the
    crashes on garbage, joined pieces reach the parser's deeper branches."""
    return st.one_of(st.text(max_size=max_chars), st.lists(st.sampled_from(pieces), max_size=max_pieces).map("".join))


shell_text = text_or_pieces(SHELL_PIECES, 300, 40)
alloc_text = text_or_pieces(ALLOC_PIECES, 80, 25)
fast = settings(
    max_examples=int(os.environ.get("MEMTUNE_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@fast
@given(alloc_text, st.one_of(st.none(), VERSIONS))
def test_alloc_conf_never_raises(text: str, version) -> None:
    parsed = ac.parse(text, version)
    for verdict in parsed.verdicts:
        assert verdict.accepted or verdict.reason
        if verdict.accepted:
            fixed = ac.suggest_fix(text, verdict)
            assert isinstance(fixed, str)
        else:
            assert isinstance(ac.suggest_fix(text, verdict), str)


@fast
@given(shell_text)
def test_launch_script_never_raises(text: str) -> None:
    script = parse_text(text, "x.sh")
    for command in script.commands:
        split_program_args(command.program_args, frozenset({"use-nccl-ub"}))
        script.env_for(command)
    assert all(setting.line >= 1 for setting in script.env)


@fast
@given(text_or_pieces(SHELL_PIECES + ALLOC_PIECES, 60, 8))
def test_override_parsers_never_raise(text: str) -> None:
    override = parse_override(text)
    if override is not None:
        run_view.hydra_value(override.value)
    run_view.hydra_value(text)
    for kind in ("int", "bool", "list", "str"):
        run_view.coerce(text, kind)


def run_main(main, argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()  # capsys is shared by all examples: start clean
    with pytest.raises(SystemExit) as exit_info:
        cli.run(main, "helper", argv)
    err = capsys.readouterr().err
    return exit_info.value.code, err


def assert_exit_contract(code: int, err: str, allowed: tuple[int, ...], needle: str = "") -> None:
    """Only the ``allowed`` exit codes; a usage error (2) is one stderr line (holding ``needle``)."""
    assert code in allowed
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and needle in err


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(text)
    return path


@fast
@given(shell_text, st.sampled_from([None, "2.1", "2.8", "2.9.1", "2.11"]))
def test_check_env_on_random_scripts(capsys, text: str, version) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "job.sh", text.replace("\x00", ""))
        argv = ["--script", path, "--json"] + (["--torch-version", version] if version else [])
        code, err = run_main(check_env.main, argv, capsys)
    assert_exit_contract(code, err, (0, 1, 2))


@fast
@given(text_or_pieces(YAML_PIECES, 200, 30))
def test_check_env_on_random_yaml(capsys, text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "cfg.yaml", text.replace("\x00", ""))
        code, err = run_main(check_env.main, ["--config", path], capsys)
    assert_exit_contract(code, err, (0, 1, 2), "error:")


@fast
@given(st.lists(st.one_of(st.text(max_size=20), st.sampled_from(SHELL_PIECES)), min_size=1, max_size=4))
def test_check_env_on_random_overrides(capsys, overrides: list[str]) -> None:
    argv = ["--"] + [o.replace("\x00", "") for o in overrides]
    code, err = run_main(check_env.main, argv, capsys)
    assert_exit_contract(code, err, (0, 1, 2))


@fast
@given(st.text(max_size=120))
def test_env_file_random_text(capsys, text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "job.env", text.replace("\x00", ""))
        code, err = run_main(check_env.main, ["--env-file", path], capsys)
    assert_exit_contract(code, err, (0, 1, 2))


@fast
@given(shell_text, st.sampled_from([[], ["--preset", "qwen3-8b"], ["--tp", "2"], ["--form", "python"]]))
def test_regather_config_on_random_scripts(capsys, text: str, extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "job.sh", text.replace("\x00", ""))
        code, err = run_main(regather_config.main, ["--script", path, "--json", *extra], capsys)
    assert_exit_contract(code, err, (0, 2))


@fast
@given(text_or_pieces(RECIPE_PIECES, 200, 30))
def test_regather_config_on_random_recipes(capsys, text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "recipe.py", text)
        code, err = run_main(regather_config.main, ["--recipe", path, "--json"], capsys)
    assert_exit_contract(code, err, (0, 2))


def test_invalid_yaml_is_exit_2_with_line(capsys, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  num_layers: [1, 2\n")
    code, err = run_main(check_env.main, ["--config", str(path)], capsys)
    assert code == 2 and "not valid YAML" in err and str(path) in err
