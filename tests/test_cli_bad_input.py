"""Bad input is expected input: every helper answers it with one line on stderr, exit 2.

One table, one row per way a user or an agent gets an input wrong (missing file, directory,
binary, empty, non-UTF-8, broken YAML, a list or a scalar where a mapping belongs, wrong
JSON types, huge / negative / zero sizes, unknown presets, impossible parallelism, malformed
overrides and sizes, truncated gzip, conflicting options). Each row asserts the exit code,
exactly one stderr line, no traceback, that the line names the offending file / field /
value, and - with --json - that stdout is empty or one JSON document.

Rows run in-process through ``memtune.cli.run`` (the same path the entry points take), so an
unexpected exception fails the row instead of being printed. The few behaviours that need a
real process (closed stdin, a reader that hangs up) run the entry point as a subprocess.

Rows marked xfail(strict=True) are known bugs in files another engineer owns; when the bug
is fixed the row starts passing and the strict xfail turns red, so the mark must go.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helper_cli import REPO, invoke

DATA = Path(__file__).resolve().parent / "data" / "bad-input"
OOM = Path(__file__).resolve().parent / "data" / "oom-samples"


@dataclass(frozen=True)
class Row:
    helper: str
    args: tuple[str, ...]
    needles: tuple[str, ...]  # each must appear in the error line (file, field, value, fix)
    code: int = 2
    xfail: str | None = None


def row(helper: str, args: str | tuple[str, ...], *needles: str, code: int = 2, xfail: str | None = None):
    argv = tuple(args.split()) if isinstance(args, str) else args
    r = Row(helper, argv, needles, code, xfail)
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(r, id=f"{helper}:{' '.join(argv)}"[:90], marks=marks)


@pytest.fixture
def made(tmp_path: Path) -> Path:
    """Inputs that are not committed: binaries, bad encodings, a cut gzip, a folder."""
    (tmp_path / "ls.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    (tmp_path / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 64)
    (tmp_path / "latin1.txt").write_bytes(b"model:\n  name: caf\xe9 \xff\xfe\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    log = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n" * 2000
    packed = gzip.compress(log)
    (tmp_path / "cut.log.gz").write_bytes(packed[: len(packed) // 2])
    (tmp_path / "deep.yaml").write_text("model: " + "[" * 20000 + "\n")
    (tmp_path / "folder").mkdir()
    return tmp_path


def expand(args: tuple[str, ...], made: Path) -> list[str]:
    return [a.replace("{data}", str(DATA)).replace("{tmp}", str(made)) for a in args]


LLAMA8B = "--preset llama3-8b --gpus 8"

ROWS = [
    # ---------------------------------------------------------------- diagnose.py
    row("diagnose", "{tmp}/missing.log", "missing.log", "no such file"),
    row("diagnose", "{tmp}/folder", "folder", "directory"),
    row("diagnose", "{tmp}/ls.bin", "ls.bin", "binary"),
    row("diagnose", "{tmp}/plot.png --json", "plot.png", "binary"),
    row("diagnose", "{tmp}/cut.log.gz", "cut.log.gz", "complete"),
    row("diagnose", "{tmp}/cut.log.gz --json", "cut.log.gz"),
    row(
        "diagnose",
        (str(OOM / "01_pytorch_pr99699_new_format_capacty.txt"), "{tmp}/ls.bin", "--json"),
        "ls.bin",
        "binary",
    ),
    row("diagnose", "", "--symptom"),
    row("diagnose", "- -", "standard input"),
    row("diagnose", "--symptom x --limit 0", "--limit", "0"),
    row("diagnose", "--symptom x --limit lots", "--limit", "lots"),
    row("diagnose", ("--symptom", "  "), "--symptom"),
    row("diagnose", "--symptom oom {tmp}/empty.txt", "--symptom", "not both"),
    row("diagnose", "{tmp}/empty.txt", "empty.txt", "empty", "<<'EOF'"),
    row("diagnose", "{tmp}/empty.txt --json", "empty.txt", "empty"),
    row("diagnose", "-", "standard input is empty", "<<'EOF'"),
    # ---------------------------------------------------------------- estimate_memory.py
    row("estimate_memory", "", "no model", "--preset"),
    row("estimate_memory", "--preset llama-9000 --gpus 8", "llama-9000", "llama3-8b"),
    row("estimate_memory", "--preset llama-9000 --gpus 8 --json", "llama-9000"),
    row("estimate_memory", "--preset llama3-8b --gpus 7 --tp 2", "7", "TP"),
    row("estimate_memory", f"{LLAMA8B} --tp 0", "--tp", "0"),
    row("estimate_memory", f"{LLAMA8B} --mbs -1", "--mbs", "-1"),
    row("estimate_memory", f"{LLAMA8B} --seq-length 99999999999999999999999", "seq_length", "99999999999999999999999"),
    row("estimate_memory", f"{LLAMA8B} --pp 2 --vpp 3", "virtual_pipeline_model_parallel_size", "3"),
    row("estimate_memory", f"{LLAMA8B} --vpp 2", "pipeline_model_parallel_size"),
    row("estimate_memory", "--preset deepseek-v3 --gpus 1024 --ep 7", "expert_model_parallel_size 7", "256"),
    row("estimate_memory", f"{LLAMA8B} --gbs 7 --mbs 2", "global_batch_size 7"),
    row("estimate_memory", f"{LLAMA8B} --gpu-memory 80XB", "--gpu-memory", "80XB"),
    row("estimate_memory", f"{LLAMA8B} --gpu-memory 80XB --json", "80XB"),
    # click reads a value that starts with '-' as the option's value (argparse took it for an
    # option and needed --gpu-memory=-1GiB), so the line now names the negative size itself
    row("estimate_memory", f"{LLAMA8B} --gpu-memory -1GiB", "--gpu-memory", "-1GiB", "negative"),
    row("estimate_memory", f"{LLAMA8B} --gpu-memory=-1GiB", "--gpu-memory", "-1GiB"),
    # click does not expand abbreviations (argparse read --lora as --lora-dim): an unknown option
    # named with the one it resembles
    row("plan_memory", f"{LLAMA8B} --lora", "no such option", "--lora", "did you mean --lora-dim"),
    # a shortened option is offered the options it starts, not click's edit-distance guesses
    # ("--seq" was answered with --ep or --mbs or --preset)
    row(
        "estimate_memory",
        f"{LLAMA8B} --seq 4096",
        "no such option: --seq (did you mean --seq-length or --sequence-parallel?)",
    ),
    row("estimate_memory", f"{LLAMA8B} --gpu-memory 0GB", "--gpu-memory", "0GB"),
    row("estimate_memory", f"{LLAMA8B} --first-stage-layers 40 --pp 2", "40"),
    row("estimate_memory", "--example a.b", "'a.b'", "=value"),
    row("estimate_memory", "--example =x", "'=x'"),
    row("estimate_memory", "--example ~", "'~'"),
    row("estimate_memory", "--example model.tensor_model_parallel_size=abc", "model.tensor_model_parallel_size", "abc"),
    row("estimate_memory", f"{LLAMA8B} a.b=1", "a.b=1", "--config"),
    row("estimate_memory", "--hf-config {tmp}/missing.json --gpus 8", "missing.json"),
    row("estimate_memory", "--hf-config {tmp}/folder --gpus 8", "folder"),
    row("estimate_memory", "--hf-config {tmp}/ls.bin --gpus 8", "ls.bin", "binary"),
    row("estimate_memory", "--hf-config {tmp}/plot.png --gpus 8 --json", "plot.png", "binary"),
    row("estimate_memory", "--hf-config {tmp}/latin1.txt --gpus 8", "latin1.txt", "UTF-8"),
    row("estimate_memory", "--hf-config {tmp}/empty.txt --gpus 8", "empty.txt", "JSON"),
    row("estimate_memory", "--hf-config {data}/hf-list.json --gpus 8", "hf-list.json", "object"),
    row(
        "estimate_memory", "--hf-config {data}/hf-missing-fields.json --gpus 8", "hf-missing-fields.json", "vocab_size"
    ),
    row(
        "estimate_memory",
        "--hf-config {data}/hf-infinite-layers.json --gpus 8",
        "hf-infinite-layers.json",
        "num_hidden_layers",
        "inf",
    ),
    row(
        "estimate_memory",
        "--hf-config {data}/hf-nan-layers.json --gpus 8",
        "hf-nan-layers.json",
        "num_hidden_layers",
        "nan",
    ),
    row("estimate_memory", "--hf-config {data}/hf-fraction-layers.json --gpus 8", "num_hidden_layers", "32.5"),
    row("estimate_memory", "--hf-config {data}/hf-bool-layers.json --gpus 8", "num_hidden_layers", "True"),
    row("estimate_memory", "--hf-config {data}/hf-string-width.json --gpus 8", "hidden_size", "'4096'"),
    row(
        "estimate_memory",
        "--hf-config {data}/hf-negative-layers.json --gpus 8",
        "hf-negative-layers.json",
        "num_hidden_layers",
        "-4",
    ),
    row("estimate_memory", "--megatron-args {tmp}/ls.bin --gpus 8", "ls.bin", "binary"),
    row("estimate_memory", "--megatron-args {tmp}/empty.txt --gpus 8", "empty.txt", "--flags"),
    row("estimate_memory", "--megatron-args {data}/broken.yaml --gpus 8", "broken.yaml", "YAML"),
    row("estimate_memory", "--megatron-args {data}/list.yaml --gpus 8", "list.yaml", "mapping"),
    row("estimate_memory", "--megatron-args {data}/flags-scalar.yaml --gpus 8", "flags-scalar.yaml", "mapping"),
    row(
        "estimate_memory",
        "--megatron-args {data}/flags-list-value.json --gpus 8",
        "flags-list-value.json",
        "--num-layers",
        "[1, 2]",
    ),
    row("estimate_memory", "--megatron-args {data}/unclosed-quote.sh --gpus 8", "unclosed-quote.sh", "quot"),
    row(
        "estimate_memory",
        "--megatron-args {data}/flags-word-layers.yaml --gpus 8",
        "flags-word-layers.yaml",
        "--num-layers",
        "many",
    ),
    row(
        "estimate_memory",
        "--megatron-args {data}/flags-missing-width.yaml --gpus 8",
        "flags-missing-width.yaml",
        "--hidden-size",
    ),
    row("estimate_memory", "--preset llama3-8b --preset llama3-70b --gpus 8", "--preset", "twice", "llama3-70b"),
    row("estimate_memory", "--hf-config a.json --hf-config b.json --gpus 8", "--hf-config", "twice", "b.json"),
    row("estimate_memory", "--megatron-args a.sh --megatron-args b.sh --json", "--megatron-args", "twice"),
    row("estimate_memory", "--config a.yaml --config b.yaml --preset llama3-8b", "--config", "twice"),
    row("plan_memory", "--preset llama3-8b --preset llama3-70b --gpus 8", "--preset", "twice"),
    # every single-valued option, not only the sources: click would keep the last silently
    row("estimate_memory", f"{LLAMA8B} --tp 2 --tp 4", "--tp", "twice", "'4'"),
    row("plan_memory", "--preset llama3-8b --gpus 8 --world-size 16", "--gpus", "twice", "'16'"),
    row("check_env", "--set A=1 --torch-version 2.4 --torch-version 2.8", "--torch-version", "twice"),
    row("sign_skill", "verify --signature a.sig --signature b.sig", "--signature", "twice"),
    row("regather_config", "--preset qwen3-8b --preset llama3-8b --tp 2", "--preset", "twice"),
    row("regather_config", "--recipe a.py --recipe b.py --preset qwen3-8b --tp 2", "--recipe", "twice"),
    row("estimate_memory", f"--config {{tmp}}/missing.yaml {LLAMA8B}", "missing.yaml"),
    row("estimate_memory", f"--config {{tmp}}/ls.bin {LLAMA8B}", "ls.bin", "binary"),
    row("estimate_memory", f"--config {{tmp}}/latin1.txt {LLAMA8B}", "latin1.txt", "UTF-8"),
    row("estimate_memory", f"--config {{data}}/broken.yaml {LLAMA8B}", "broken.yaml:3", "YAML"),
    row("estimate_memory", f"--config {{data}}/broken.yaml {LLAMA8B} --json", "broken.yaml"),
    row("estimate_memory", f"--config {{data}}/list.yaml {LLAMA8B}", "list.yaml", "mapping"),
    row("estimate_memory", f"--config {{data}}/scalar.yaml {LLAMA8B}", "scalar.yaml", "mapping"),
    row("estimate_memory", f"--config {{data}}/section-list.yaml {LLAMA8B}", "model", "mapping"),
    row("estimate_memory", f"--config {{data}}/tp-word.yaml {LLAMA8B}", "model.tensor_model_parallel_size", "four"),
    row("estimate_memory", f"--config {{data}}/tp-infinite.yaml {LLAMA8B}", "model.tensor_model_parallel_size", "inf"),
    row("estimate_memory", f"--config {{data}}/seq-fraction.yaml {LLAMA8B}", "model.seq_length", "4096.5"),
    row("estimate_memory", f"--config {{data}}/python-tag.yaml {LLAMA8B}", "python-tag.yaml:2", "python/object"),
    row("estimate_memory", f"--config {{tmp}}/deep.yaml {LLAMA8B}", "deep.yaml", "nested"),
    row("estimate_memory", "--config {data}/tp-word.yaml --example", "--config", "--example"),
    row("estimate_memory", f"--fp8 bogus {LLAMA8B}", "--fp8", "bogus"),
    row("estimate_memory", f"--cpu-offload-layers 32 {LLAMA8B}", "cpu", "32"),
    row(
        "estimate_memory",
        "--example model.tensor_parallel_size=8",
        "tensor_parallel_size",
        "tensor_model_parallel_size",
    ),
    # ---------------------------------------------------------------- plan_memory.py
    row("plan_memory", "--preset nope", "nope", "llama3-8b"),
    row("plan_memory", "--example --headroom 200%", "--headroom", "200%"),
    row("plan_memory", "--example --headroom -5%", "--headroom", "-5%"),  # click takes -5% as the value
    row("plan_memory", "--example --headroom abc", "--headroom", "abc"),
    row("plan_memory", "--example --headroom 100GiB", "--headroom", "100GiB"),
    row("plan_memory", "--example --top 0", "--top", "0"),
    row("plan_memory", "--example --gpus-per-node 0", "--gpus-per-node", "0"),
    row("plan_memory", "--example --gpu-memory 80XB --json", "80XB"),
    row("plan_memory", "--preset llama3-8b --gpus 7 --tp 2", "7"),
    row("plan_memory", "--preset llama3-8b --gpus 8 --pp 2 --vpp 3", "virtual_pipeline_model_parallel_size"),
    row("plan_memory", "--example ~", "'~'"),
    row("plan_memory", "--hf-config {tmp}/ls.bin --gpus 8", "ls.bin", "binary"),
    row("plan_memory", "--hf-config {data}/hf-infinite-layers.json --gpus 8 --json", "num_hidden_layers"),
    row("plan_memory", "--example model.tensor_parallel_size=8", "tensor_parallel_size", "tensor_model_parallel_size"),
    # ---------------------------------------------------------------- check_env.py
    row("check_env", "", "nothing to check"),
    row("check_env", "--script {tmp}/missing.sh", "missing.sh"),
    row("check_env", "--script {tmp}/folder", "folder"),
    row("check_env", "--script {tmp}/ls.bin", "ls.bin", "binary"),
    row("check_env", "--script {tmp}/plot.png --json", "plot.png", "binary"),
    row("check_env", "--script {data}/unclosed-quote.sh", "unclosed-quote.sh:2", "never closed"),
    row("check_env", "--script {data}/word-for-number.sh", "word-for-number.sh:2", "--num-layers", "thirty-two"),
    row("check_env", "--env-file {tmp}/ls.bin", "ls.bin", "binary"),
    row("check_env", "--env-file {data}/garbage-line.env", "garbage-line.env:2", "KEY=VALUE"),
    row("check_env", "--env-file {data}/unclosed-quote.env", "unclosed-quote.env:1", "quote"),
    row("check_env", "--config {tmp}/ls.bin", "ls.bin", "binary"),
    row("check_env", "--config {tmp}/latin1.txt", "latin1.txt", "UTF-8"),
    row("check_env", "--config {data}/broken.yaml", "broken.yaml:3", "YAML"),
    row("check_env", "--config {data}/broken.yaml --json", "broken.yaml:3"),
    row("check_env", "--config {data}/list.yaml", "list.yaml", "mapping"),
    row("check_env", "--config {data}/scalar.yaml", "scalar.yaml", "mapping"),
    row("check_env", "--config {data}/section-list.yaml", "section-list.yaml:1", "model", "mapping"),
    row("check_env", "--config {data}/tp-word.yaml", "tp-word.yaml:2", "tensor_model_parallel_size", "four"),
    row("check_env", "--config {data}/tp-infinite.yaml", "tp-infinite.yaml:2", "inf"),
    row("check_env", "--config {data}/seq-fraction.yaml", "seq-fraction.yaml:2", "4096.5"),
    row("check_env", "--config {data}/python-tag.yaml", "python-tag.yaml:2", "tensor_model_parallel_size"),
    row("check_env", "--config {tmp}/deep.yaml", "deep.yaml", "nested"),
    row("check_env", "--set FOO", "--set", "FOO"),
    row("check_env", "--set =x", "'=x'"),
    row("check_env", "--set A=1 a.b", "'a.b'"),
    row("check_env", "--set A=1 =x", "'=x'"),
    row("check_env", "--set A=1 ~", "'~'"),
    row("check_env", "--set A=1 model.tensor_model_parallel_size=abc", "model.tensor_model_parallel_size", "abc"),
    row("check_env", "--set A=1 ddp.nccl_ub=maybe", "ddp.nccl_ub", "maybe"),
    row(
        "check_env",
        "--set A=1 model.pipeline_model_parallel_size=0",
        "model.pipeline_model_parallel_size",
        "at least 1",
    ),
    row(
        "regather_config",
        "--preset qwen3-8b model.tensor_model_parallel_size=-2",
        "model.tensor_model_parallel_size",
        "-2",
    ),
    row(
        "check_env",
        "--set A=1 model.tensor_parallel_size=8",
        "model.tensor_parallel_size",
        "model.tensor_model_parallel_size",
    ),
    row("check_env", "--set A=1 train.global_batch_sise=64", "train.global_batch_sise", "train.global_batch_size"),
    row("check_env", "--set A=1 --torch-version banana", "--torch-version", "banana"),
    row("check_env", "--set A=1 --world-size 0", "--world-size", "0"),
    row("check_env", "--set A=1 --gpus -3", "-3"),
    row("check_env", "--set A=1 --gpu Z80", "--gpu", "Z80"),
    row("check_env", "--set A=1 --world-size --json", "--world-size"),
    # ---------------------------------------------------------------- regather_config.py
    row("regather_config", "", "nothing", "--preset"),
    row("regather_config", "--json", "nothing"),
    row("regather_config", "--preset nope --tp 2", "nope"),
    row("regather_config", "--preset qwen3-8b --tp 0", "--tp", "0"),
    row("regather_config", "--preset qwen3-8b --tp 3 --seq-length 8192", "num_attention_heads 32", "TP 3"),
    row("regather_config", "--preset qwen3-8b --tp 2 --world-size 3", "world size 3"),
    row("regather_config", "--preset qwen3-8b --tp 2 --target-modules ,", "--target-modules", "','"),
    row("regather_config", "--preset qwen3-8b --tp 2 a.b", "'a.b'"),
    row(
        "regather_config",
        "--preset qwen3-8b model.tensor_model_parallel_size=abc",
        "model.tensor_model_parallel_size",
        "abc",
    ),
    row("regather_config", "--preset qwen3-8b --tp 2 --form bogus --json", "--form", "bogus"),
    row("regather_config", "--preset qwen3-8b --tp 2 peft.dimm=8", "peft.dimm", "peft.dim?"),
    row("regather_config", "--config {tmp}/ls.bin", "ls.bin", "binary"),
    row("regather_config", "--config {data}/broken.yaml --json", "broken.yaml:3"),
    row("regather_config", "--config {data}/section-list.yaml", "section-list.yaml:1", "model"),
    row("regather_config", "--script {tmp}/ls.bin", "ls.bin", "binary"),
    row("regather_config", "--script {data}/unclosed-quote.sh", "unclosed-quote.sh:2", "never closed"),
    row("regather_config", "--env-file {tmp}/ls.bin --preset qwen3-8b --tp 2", "ls.bin", "binary"),
    row("regather_config", "--recipe {tmp}/missing.py --preset qwen3-8b --tp 2", "missing.py"),
    row("regather_config", "--recipe {tmp}/ls.bin --preset qwen3-8b --tp 2", "ls.bin", "binary"),
    row(
        "regather_config",
        "--recipe {data}/broken-recipe.py.txt --preset qwen3-8b --tp 2",
        "broken-recipe.py.txt:2",
        "Python",
    ),
    row("regather_config", "--recipe {data}/no-lora-recipe.py --preset qwen3-8b --tp 2", "no-lora-recipe.py", "LoRA"),
    # ---------------------------------------------------------------- lint_skill.py / sign_skill.py / run_benchmark.py
    row("lint_skill", "{tmp}/missing", "missing", "directory"),
    row("lint_skill", "{tmp}/ls.bin --json", "ls.bin", "directory"),
    row("lint_skill", "--bogus", "--bogus"),
    row("sign_skill", "", "sign or verify"),
    row("sign_skill", "bogus", "bogus"),
    row("sign_skill", "verify {tmp}/missing", "missing"),
    row("sign_skill", "verify {tmp}/ls.bin", "ls.bin", "directory"),
    row("sign_skill", "verify {tmp}/folder --json", "skill.oms.sig"),
    row("sign_skill", "verify {tmp}/folder --signature {tmp}/ls.bin", "ls.bin", "JSON"),
    row("sign_skill", "verify {tmp}/folder --signature {tmp}/empty.txt --json", "empty.txt", "JSON"),
    row("sign_skill", "verify {tmp}/folder --signature {tmp}/folder", "folder", "directory", "Sigstore"),
    row(
        "sign_skill",
        "sign {tmp}/folder --private-key {tmp}/ls.bin --signing-cert {tmp}/ls.bin --cert-chain {tmp}/ls.bin",
        "ls.bin",
        "PEM",
    ),
    # ---------------------------------------------------------------- runtime_memory.py
    row("runtime_memory", "", "FILE"),
    row("runtime_memory", "--json", "FILE"),
    row("runtime_memory", "{tmp}/missing.log", "missing.log", "no such file"),
    row("runtime_memory", "{tmp}/folder", "folder", "directory"),
    row("runtime_memory", "{tmp}/ls.bin", "ls.bin", "binary"),
    row("runtime_memory", "{tmp}/cut.log.gz --json", "cut.log.gz"),
    row("runtime_memory", "{tmp}/empty.txt", "empty.txt", "no memory measurement"),
    row("runtime_memory", "{tmp}/latin1.txt --json", "latin1.txt", "no memory measurement"),
    row("runtime_memory", "{tmp}/plot.png", "plot.png", "binary"),
    row("runtime_memory", "{tmp}/empty.txt --gpu NoSuchGPU", "--gpu", "NoSuchGPU"),
    row("runtime_memory", "{tmp}/empty.txt --gpu H200 --gpu-memory 80GiB", "--gpu", "not both"),
    row("runtime_memory", "{tmp}/empty.txt --plot {tmp}/chart.png", "--plot", ".svg"),
    row("runtime_memory", "{tmp}/empty.txt --plot {tmp}/nowhere/chart.svg", "--plot", "does not exist"),
    row("runtime_memory", "{tmp}/empty.txt --tp 2", "--preset"),
    row("runtime_memory", "{tmp}/empty.txt model.num_layers=4", "model.num_layers=4", "--config"),
    row("runtime_memory", "- -", "standard input"),
    row("runtime_memory", "{tmp}/empty.txt --preset nope", "nope"),
    # ---------------------------------------------------------------- trace_regression.py
    row("trace_regression", "", "two inputs"),
    row("trace_regression", "--json", "two inputs"),
    row("trace_regression", "{tmp}/missing.log {tmp}/missing.log", "missing.log", "no such file"),
    row("trace_regression", "{tmp}/folder {tmp}/empty.txt", "folder", "directory"),
    row("trace_regression", "{tmp}/ls.bin {tmp}/ls.bin --json", "ls.bin", "binary"),
    row("trace_regression", "{tmp}/empty.txt {tmp}/empty.txt", "empty.txt"),
    row("trace_regression", "{tmp}/cut.log.gz {tmp}/cut.log.gz", "cut.log.gz"),
    row("trace_regression", "--git HEAD -- {tmp}/empty.txt", "--git", "main..HEAD"),
    row("trace_regression", "{tmp}/empty.txt {tmp}/empty.txt --threshold -1%", "--threshold", "negative"),
    row("trace_regression", "{tmp}/empty.txt {tmp}/empty.txt --gpu NoSuchGPU", "--gpu", "NoSuchGPU"),
    row("run_benchmark", "--json", "choose a command"),
    row("run_benchmark", "run --agent nosuch", "nosuch", "command:"),
    row("run_benchmark", "run --agent command:{tmp}/missing", "missing", "not executable"),
    row("run_benchmark", "run --agent local --attempts 0", "--attempts"),
    row("run_benchmark", "report --run nosuch --output -", "nosuch", "no such run"),
    row("run_benchmark", "validate --evals {tmp}/ls.bin", "ls.bin", "JSON"),
]

PROGS = {
    "diagnose": "diagnose.py",
    "estimate_memory": "estimate_memory.py",
    "plan_memory": "plan_memory.py",
    "check_env": "check_env.py",
    "regather_config": "regather_config.py",
    "runtime_memory": "runtime_memory.py",
    "trace_regression": "trace_regression.py",
    "sign_skill": "sign_skill.py",
    "lint_skill": "lint_skill.py",
    "run_benchmark": "run_benchmark.py",
}


def run_in_process(helper: str, argv: list[str], capsys) -> tuple[int, str, str]:
    assert PROGS[helper] == f"{helper}.py"  # the program name each error line must start with
    result = invoke(helper, *argv)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("case", ROWS)
def test_bad_input_is_one_line_exit_2(case: Row, made: Path, capsys) -> None:
    argv = expand(case.args, made)
    code, out, err = run_in_process(case.helper, argv, capsys)
    lines = err.strip().splitlines()
    assert code == case.code, f"exit {code}, stderr: {err!r}, stdout: {out[:300]!r}"
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}: {err!r}"
    assert "Traceback" not in err
    assert lines[0].startswith(f"{PROGS[case.helper]}") and "error:" in lines[0], lines[0]
    for needle in case.needles:
        assert needle.lower() in lines[0].lower(), f"{needle!r} not named in: {lines[0]}"
    if "--json" in argv:
        assert out.strip() == "" or json.loads(out) is not None, (
            "a --json error must leave stdout empty or one JSON document"
        )
    else:
        assert out.strip() == "", f"an error must not print a partial answer: {out[:300]!r}"


# ---------------------------------------------------------------- --json: exactly one document


JSON_ROWS = [
    pytest.param("diagnose", ("--symptom", "OOM on one rank only", "--json"), id="diagnose --symptom --json"),
    pytest.param(
        "diagnose", (str(OOM / "01_pytorch_pr99699_new_format_capacty.txt"), "--json"), id="diagnose log --json"
    ),
    pytest.param(
        "check_env",
        ("--set", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,garbage", "--json"),
        id="check_env findings --json",
    ),
    pytest.param("regather_config", ("--preset", "qwen3-8b", "--tp", "2", "--json"), id="regather_config --json"),
    pytest.param("estimate_memory", ("--example", "--json"), id="estimate_memory --json"),
    pytest.param(
        "runtime_memory",
        (
            str(Path(__file__).resolve().parent / "data" / "runtime-samples" / "h200-runtime" / "torchrun_leak.log"),
            "--json",
        ),
        id="runtime_memory --json",
    ),
    pytest.param(
        "trace_regression",
        tuple(
            str(Path(__file__).resolve().parent / "data" / "runtime-samples" / "h200-runtime" / n)
            for n in ("torchrun_base.log", "torchrun_leak.log")
        )
        + ("--json",),
        id="trace_regression --json",
    ),
    pytest.param("estimate_memory", ("--list-presets", "--json"), id="estimate_memory --list-presets --json"),
    pytest.param("plan_memory", ("--list-presets", "--json"), id="plan_memory --list-presets --json"),
]


@pytest.mark.parametrize(("helper", "args"), JSON_ROWS)
def test_json_prints_exactly_one_document(helper: str, args: tuple[str, ...], capsys) -> None:
    code, out, err = run_in_process(helper, list(args), capsys)
    assert code in (0, 1), err
    json.loads(out)  # raises on plain text, or on two documents back to back


# ---------------------------------------------------------------- needs a real process


def _entry(helper: str) -> list[str]:
    return [sys.executable, str(REPO / "scripts" / f"{helper}.py")]


def test_closed_stdin_is_one_line_exit_2() -> None:
    # `diagnose.py -` started with no standard input at all (`<&-`, some agent sandboxes)
    proc = subprocess.run(
        _entry("diagnose") + ["-"],
        capture_output=True,
        stdin=None,
        text=True,
        timeout=60,
        preexec_fn=lambda: __import__("os").close(0),
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "standard input" in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("plan_memory", "--example", "--sweep", "--top", "1000", "--json"),
        ("plan_memory", "--example", "--sweep", "--top", "1000"),
    ],
)
def test_reader_hanging_up_is_not_a_traceback(args: tuple[str, ...]) -> None:
    # `helper | head -1`: the reader goes away after one line of a >64 KiB answer
    proc = subprocess.Popen(_entry(args[0]) + list(args[1:]), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert first, "the helper printed nothing"
    assert code == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


# ---------------------------------------------------------------- malformed env values: the fix must work


@pytest.mark.parametrize(
    "value",
    [
        "expandable_segments:maybe",
        "expandable_segments:",
        "expandable_segments:\ufffd",
        "max_split_size_mb:64,expandable_segments:tru",
    ],
)
def test_malformed_alloc_conf_gets_a_fix_pytorch_accepts(value: str, capsys) -> None:
    from memtune.readers import alloc_conf

    code, out, err = run_in_process(
        "check_env", ["--set", f"PYTORCH_CUDA_ALLOC_CONF={value}", "--torch-version", "2.8", "--json"], capsys
    )
    assert code == 1, err
    finding = next(f for f in json.loads(out)["findings"] if f["rule"] == "MT007")
    suggested = finding["fix"].split("PYTORCH_CUDA_ALLOC_CONF=", 1)[1].split()[0]
    verdicts = alloc_conf.parse(suggested, (2, 8)).verdicts
    assert verdicts and all(v.accepted for v in verdicts), f"the suggested fix {suggested!r} is rejected too"


@pytest.mark.parametrize(
    "override",
    [
        "model.encoder_pipeline_model_parallel_size=1",  # real keys that merely look like known ones
        "model.pipeline_model_parallel_split_rank=2",
        "model.hierarchical_context_parallel_sizes=[2,2]",
        "++model.tensor_parallel_size=8",  # ++ says: keep it as written
    ],
)
def test_real_or_forced_keys_are_not_called_typos(override: str, capsys) -> None:
    code, out, err = run_in_process(
        "check_env", ["--set", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", override], capsys
    )
    assert code == 0, err


def test_closed_stdout_is_not_a_traceback() -> None:
    # `helper --json >&-`: nowhere to print; the helper must still exit cleanly
    proc = subprocess.run(
        _entry("diagnose") + ["--symptom", "oom", "--json"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=lambda: __import__("os").close(1),
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_full_disk_is_one_line() -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            _entry("estimate_memory") + ["--example"],
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "No space left" in lines[0], proc.stderr


@pytest.mark.parametrize("headroom", ["0%", "0GiB"])
def test_zero_headroom_is_a_valid_choice(headroom: str, capsys) -> None:
    code, out, err = run_in_process("plan_memory", ["--example", "--top", "1", "--headroom", headroom], capsys)
    assert code == 0, err


def test_full_disk_while_writing_a_file_names_the_file(tmp_path, capsys) -> None:
    import errno

    from memtune import cli
    from memtune.files.writing import writing

    target = tmp_path / "BENCHMARK.md"

    def main(argv):
        with writing(target):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(SystemExit) as stop:
        cli.run(main, "helper.py", [])
    err = capsys.readouterr().err
    assert (
        stop.value.code == 2
        and err == f"helper.py: error: cannot write {target}: No space left on device; free some space and run again\n"
    )
