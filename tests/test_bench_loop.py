"""The local agent's loop (catalog -> load -> run helpers -> answer) with a scripted fake model.

No llama_cpp and no model file: the model is a list of canned replies, and the test
checks what the loop showed it, what it executed and what it recorded.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from helper_cli import invoke
from memtune.bench.agents import WITH, WITHOUT, AgentUnavailable, Task, make_agent
from memtune.bench.dataset import load_dataset
from memtune.bench.grading import load_security_rules
from memtune.bench.loop import FINAL_TURN, LoopAgent, LoopSettings, Reply, run_loop
from memtune.bench.results import RunWriter, read_run
from memtune.bench.runner import Job, Runner
from memtune.bench.skill import load_skill, stage_clean_copy
from memtune.bench.tools import NOT_FOUND, Sandbox, cap, parse_action

REPO = Path(__file__).resolve().parent.parent
SKILL = load_skill(REPO)
DATASET = load_dataset(REPO / "evals" / "evals.json")
CATALOG = json.loads((REPO / "evals" / "harness" / "skill_catalog.json").read_text())["skills"]
LOG = "megatron_llama3_70b_sft_rank13_oom.log"


class ScriptedModel:
    """Returns the canned replies in order and keeps every message list it was shown."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict]] = []
        self.seeds: list[int] = []

    def chat(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int, seed: int) -> Reply:
        self.seen.append([dict(m) for m in messages])
        self.seeds.append(seed)
        text = self.replies.pop(0) if self.replies else "(out of script)"
        return Reply(text, tokens_in=100, tokens_out=10)


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    return stage_clean_copy(REPO, tmp_path_factory.mktemp("staged") / SKILL.name)


def workdir_for(tmp_path: Path, case_id: str, condition: str, staged: Path) -> Task:
    case = DATASET.by_id()[case_id]
    work = tmp_path / "project"
    work.mkdir()
    for name in case.files:
        (work / name).write_bytes((REPO / "evals" / "files" / name).read_bytes())
    if condition == WITH:
        import shutil

        shutil.copytree(staged, work / ".agents" / "skills" / SKILL.name)
    return Task(case, condition, 1, work, {}, SKILL if condition == WITH else None)


def run_block(command: str) -> str:
    return f"I will run the helper.\n```run\n{command}\n```\n"


def test_with_skill_load_run_answer(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    model = ScriptedModel(
        [
            f"```load\n{SKILL.name}\n```",
            run_block(f"python3 scripts/diagnose.py {LOG}"),
            "Fragmentation: 172 MiB requested, 2.84 GiB reserved but unallocated.",
        ]
    )
    result = run_loop(model, task, CATALOG, LoopSettings())
    assert result.activated_skill == SKILL.name
    assert result.commands == [f"python3 scripts/diagnose.py {LOG}"]
    calls = result.extra["tool_calls"]
    assert [c["exit_code"] for c in calls] == [0] and calls[0]["helper"] == "diagnose" and calls[0]["refused"] is None
    assert result.answer.startswith("Fragmentation") and result.extra["turns"] == 3
    assert (result.tokens_in, result.tokens_out) == (300, 30)
    first_system, second_system = model.seen[0][0]["content"], model.seen[1][0]["content"]
    # discovery: names and descriptions only, every skill once, sorted by name
    listed = [line[2:].split(":")[0] for line in first_system.splitlines() if line.startswith("- ")]
    assert listed == sorted([SKILL.name, *(s["name"] for s in CATALOG)])
    assert "## Failure Diagnosis" not in first_system
    # activation: the body joins the system message after the shared, cacheable base
    # (instructions + catalog), and the load rule is gone once the skill is loaded
    base = first_system[: first_system.index("\nSkills: when a skill's description matches")]
    assert second_system.startswith(base) and "## Failure Diagnosis" in second_system
    assert "load it before answering" in first_system and "load it before answering" not in second_system
    # the load turn stays in the history, answered by a short acknowledgement
    assert [m["role"] for m in model.seen[1][1:]] == ["user", "assistant", "user"]
    assert model.seen[1][2]["content"] == f"```load\n{SKILL.name}\n```"
    assert f"Skill {SKILL.name} is loaded" in model.seen[1][3]["content"]
    # the helper's real output on the fixture went back to the model
    tool_message = model.seen[2][-1]["content"]
    assert tool_message.startswith(f"Output of `python3 scripts/diagnose.py {LOG}` (exit code 0)")
    assert "fragmentation" in tool_message and "172.00 MiB" in tool_message and "2.84 GiB" in tool_message
    assert model.seeds == [task.seed, task.seed + 1, task.seed + 2]


def test_without_skill_same_tools_catalog_minus_the_skill(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITHOUT, staged)
    model = ScriptedModel([f"```load\n{SKILL.name}\n```", run_block(f"python3 scripts/diagnose.py {LOG}"), "No idea."])
    result = run_loop(model, task, CATALOG, LoopSettings())
    system = model.seen[0][0]["content"]
    assert SKILL.name not in system and all(s["name"] in system for s in CATALOG)
    assert result.activated_skill is None and result.extra["loads"] == [SKILL.name]
    assert "no installed skill named" in model.seen[1][-1]["content"]
    assert result.extra["tool_calls"][0]["exit_code"] == NOT_FOUND
    assert "no installed skill provides scripts/diagnose.py" in model.seen[2][-1]["content"]


def test_loading_a_decoy_is_recorded_as_its_activation(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "neg-nan-loss", WITH, staged)
    decoy = "training-numerical-stability"
    model = ScriptedModel([f"```load\n{decoy}\n```", "Lower the learning rate and check clipping."])
    result = run_loop(model, task, CATALOG, LoopSettings())
    assert result.activated_skill == decoy and result.commands == []
    assert "no instructions for this request" in model.seen[1][-1]["content"]


@pytest.mark.parametrize(
    "command, why",
    [
        ("bash -c 'cat /etc/passwd'", "only `python3 scripts/<helper>.py"),
        ("python3 -c 'import os; os.system(\"id\")'", "only scripts/<helper>.py"),
        ("python3 scripts/sign_skill.py sign", "not an allowed helper"),
        ("python3 scripts/run_benchmark.py run --agent local", "not an allowed helper"),
        ("python3 /etc/passwd", "relative"),
        ("python3 scripts/diagnose.py /etc/passwd", "inside the project directory"),
        ("python3 scripts/diagnose.py ../../secret.log", "inside the project directory"),
        ("python3 scripts/diagnose.py x.log ; touch pwned", "no shell operators"),
        ("python3 scripts/diagnose.py 'unclosed", "cannot parse"),
    ],
)
def test_commands_outside_the_allow_list_are_refused_unrun(
    tmp_path: Path, staged: Path, command: str, why: str
) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    call = Sandbox(task.workdir).run(command, loaded=SKILL.name)
    assert call.exit_code is None and call.refused and why in call.output
    assert not (task.workdir / "pwned").exists()


def test_nothing_reaches_a_shell(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    call = Sandbox(task.workdir).run("python3 scripts/diagnose.py '$(touch pwned)' `touch pwned2`", loaded=SKILL.name)
    assert call.exit_code == 2 and call.refused is None  # the helper got literal file names and said so
    assert not list(task.workdir.glob("pwned*"))


def test_here_document_becomes_stdin(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "capacity-after-expandable", WITH, staged)
    message = (
        "RuntimeError: CUDA out of memory. Tried to allocate 786.00 MiB (GPU 0; 14.73 GiB total capacity; "
        "13.33 GiB already allocated; 575.88 MiB free; 13.38 GiB reserved in total by PyTorch)"
    )
    action = parse_action(f"```run\npython3 scripts/diagnose.py - <<'EOF'\n{message}\nEOF\n```")
    assert (action.kind, action.text, action.stdin) == ("run", "python3 scripts/diagnose.py -", message + "\n")
    call = Sandbox(task.workdir).run(action.text, action.stdin, SKILL.name)
    assert call.exit_code == 0 and "capacity" in call.output.lower()


def test_installed_path_form_and_helper_exit_codes(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    box = Sandbox(task.workdir, output_cap=1 << 20)  # the whole JSON document, to parse it
    full = box.run(f"python3 .agents/skills/{SKILL.name}/scripts/diagnose.py {LOG} --json")
    assert full.exit_code == 0 and json.loads(full.output)["findings"][0]["kind"] == "fragmentation"
    # a helper that runs and fails on its input exits 2 (bad input), recorded as a failed run
    bad = box.run("python3 scripts/estimate_memory.py --tp 0 --example", loaded=SKILL.name)
    assert bad.exit_code == 2 and bad.to_json()["failed"] is True


def test_turn_limit_forces_a_final_answer(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    model = ScriptedModel([run_block(f"python3 scripts/diagnose.py {LOG}")] * 10)
    result = run_loop(model, task, CATALOG, LoopSettings(max_turns=3))
    assert result.extra["turns"] == 3 and len(model.seen) == 3
    assert model.seen[-1][-1]["content"] == FINAL_TURN
    assert len(result.commands) == 2 and result.answer  # the last reply stands as the answer


def test_output_cap_keeps_head_and_tail() -> None:
    text = "A" * 5000 + "Z" * 5000
    capped = cap(text, 1000)
    assert len(capped) < 1100 and capped.startswith("A" * 700) and capped.endswith("Z" * 250)
    assert "characters cut" in capped and cap("short", 1000) == "short"


def test_output_cap_cuts_between_lines_and_never_inside_a_number() -> None:
    """A character cut could leave `"free_bytes": 85899` from 8589934592: a wrong figure."""
    document = json.dumps(
        {
            "findings": [
                {"rank": r, "numbers": {"reserved_unallocated_bytes": 8589934592 + r, "requested_bytes": 786 << 20}}
                for r in range(200)
            ]
        },
        indent=2,
    )
    capped = cap(document, 4000)
    head, marker, tail = capped.partition("\n[... ")
    kept = document.splitlines()
    assert all(line in kept for line in head.splitlines() + tail.split("\n", 1)[1].splitlines())
    assert marker and "without --json" in tail.split("\n", 1)[0]
    assert "without --json" not in cap("plain text line\n" * 500, 1000)
    assert len(capped) < 4000 + 100


def test_output_cap_keeps_the_decisive_lines_of_the_fixture_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the agent sees of diagnose.py on the eval logs, text and JSON, at the loop's cap."""
    limit = LoopSettings().output_cap
    monkeypatch.chdir(REPO / "evals" / "files")  # the agent runs it on the bare file name
    for log, decisive in (
        (LOG, "fragmentation"),
        ("mbridge_llama3_8b_nccl_oom.log", "nccl-oom"),
        ("megatron_deepspeed_huge_alloc.log", "impossible-request"),
    ):
        for extra in ((), ("--json",)):
            out = invoke("diagnose", log, *extra).stdout
            seen = cap(out, limit)
            first = out[: out.index(decisive) + 200]  # the first finding's kind and what follows it
            assert decisive in seen and seen.startswith(first.rsplit("\n", 1)[0]), (log, extra)


def test_timeout_is_recorded_not_raised(tmp_path: Path, staged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)

    def slow(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout", 0))

    monkeypatch.setattr("memtune.bench.tools.subprocess.run", slow)
    call = Sandbox(task.workdir, timeout=5).run(f"python3 scripts/diagnose.py {LOG}", loaded=SKILL.name)
    assert call.exit_code is None and call.refused == "timeout" and "timed out after 5 s" in call.output


def test_runner_installs_the_skill_and_records_tool_calls(tmp_path: Path) -> None:
    """End to end through the Runner: a fresh project dir, the installed copy, the record."""
    model = ScriptedModel(
        [
            f"```load\n{SKILL.name}\n```",
            run_block(f"python3 scripts/diagnose.py {LOG}"),
            "Fragmentation on rank 13: 172 MiB requested, 2.84 GiB reserved but unallocated; "
            "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
            run_block(f"python3 scripts/diagnose.py {LOG}"),
            "I cannot tell.",
        ]
    )
    agent = LoopAgent(CATALOG, model=model)
    path = tmp_path / "run.jsonl"
    writer = RunWriter.create(path, {"type": "run", "run_id": "t"})
    rules = load_security_rules(json.loads((REPO / "evals" / "harness" / "security.json").read_text()))
    runner = Runner(agent, DATASET, SKILL, writer, rules)
    case = DATASET.by_id()["frag-log-diagnosis"]
    runner.run([Job(case, WITH, 1), Job(case, WITHOUT, 1)])
    records = {r["condition"]: r for r in read_run(path).results}
    with_skill, without = records[WITH], records[WITHOUT]
    assert with_skill["activated_skill"] == SKILL.name and with_skill["error"] is None
    assert with_skill["extra"]["tool_calls"][0]["exit_code"] == 0
    assert with_skill["grade"]["command_ok"] is True
    assert without["extra"]["tool_calls"][0]["exit_code"] == NOT_FOUND and without["activated_skill"] is None


def test_make_agent_local_is_the_loop_and_validates_settings() -> None:
    agent = make_agent("local", model_path=None, catalog=CATALOG, workers=1, timeout=10, max_turns=4)
    assert isinstance(agent, LoopAgent) and agent.describe()["settings"]["max_turns"] == 4
    forced = make_agent("local", model_path=None, catalog=CATALOG, workers=1, timeout=10, activation="forced")
    assert isinstance(forced, LoopAgent) and forced.describe()["settings"]["activation"] == "forced"
    with pytest.raises(AgentUnavailable, match="activation"):
        LoopAgent(CATALOG, settings=LoopSettings(activation="sometimes"))
    with pytest.raises(AgentUnavailable, match="max-turns"):
        make_agent("local", model_path=None, catalog=CATALOG, workers=1, timeout=10, max_turns=0)


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("```load\nnemo\n```", ("load", "nemo")),
        ("Let me load it.\n```load nemo```", ("load", "nemo")),
        ("```run python3 scripts/diagnose.py a.log```", ("run", "python3 scripts/diagnose.py a.log")),
        ("```run\npython3 scripts/diagnose.py a.log\n```\nthen more", ("run", "python3 scripts/diagnose.py a.log")),
        ("Set it:\n```bash\nexport PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n```", ("answer", None)),
        # a shell or Python fence whose first line runs a helper is a run
        ("Run:\n```bash\npython3 scripts/diagnose.py a.log\n```", ("run", "python3 scripts/diagnose.py a.log")),
        ("```sh\n$ python scripts/check_env.py --env\n```", ("run", "python scripts/check_env.py --env")),
        (
            "```python3\npython3 scripts/plan_memory.py --example\n```",
            ("run", "python3 scripts/plan_memory.py --example"),
        ),
        ("```python\nimport torch\ntorch.cuda.empty_cache()\n```", ("answer", None)),
        ("```bash\npython3 train.py --tp 8\n```", ("answer", None)),
        # the first block wins, whatever its fence
        (
            "```bash\npython3 scripts/diagnose.py a.log\n```\n```run\npython3 scripts/diagnose.py b.log\n```",
            ("run", "python3 scripts/diagnose.py a.log"),
        ),
        ("```running text``` is not a block", ("answer", None)),
        ("load\nnemo-mbridge-perf-memory-tuning\n", ("load", "nemo-mbridge-perf-memory-tuning")),
        ("load\nthe skill that fits, then answer", ("answer", None)),
    ],
)
def test_parse_action_forms(reply: str, expected) -> None:
    action = parse_action(reply)
    assert action.kind == expected[0]
    if expected[1] is not None:
        assert action.text == expected[1]


def test_reloading_a_skill_is_answered_not_repeated(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "neg-nan-loss", WITHOUT, staged)
    decoy = "training-numerical-stability"
    model = ScriptedModel([f"```load\n{decoy}\n```", f"```load\n{decoy}\n```", "Lower the learning rate."])
    result = run_loop(model, task, CATALOG, LoopSettings())
    assert "do not load it again" in model.seen[2][-1]["content"]
    assert result.answer == "Lower the learning rate." and result.activated_skill == decoy


def test_a_bash_fence_with_a_here_document_runs_with_stdin() -> None:
    action = parse_action("```bash\npython3 scripts/diagnose.py - <<'EOF'\nCUDA out of memory.\nEOF\n```")
    assert (action.kind, action.text, action.stdin) == ("run", "python3 scripts/diagnose.py -", "CUDA out of memory.\n")


def test_placeholder_file_names_are_answered_with_the_real_files(tmp_path: Path, staged: Path) -> None:
    """SKILL.md's example names (train.log, launch.sh) copied instead of the user's file."""
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    box = Sandbox(task.workdir, files=tuple(task.case.files))
    for command in (
        "python3 scripts/diagnose.py train.log",
        "python3 scripts/check_env.py --script launch.sh",
        "python3 scripts/estimate_memory.py --config=bridge.yaml",
        "python3 scripts/diagnose.py LOG_FILE",
    ):
        call = box.run(command, loaded=SKILL.name)
        assert call.exit_code is None and call.refused == "missing-file" and call.to_json()["failed"]
        assert LOG in call.output and "stand for the user's files" in call.output
    # the real name runs; overrides and option values are not taken for files
    assert box.run(f"python3 scripts/diagnose.py {LOG}", loaded=SKILL.name).exit_code == 0
    assert box.missing_file(["--example", "model.num_layers=40", "--set", "NCCL_DEBUG=INFO"]) is None
    no_files = Sandbox(task.workdir, files=()).run("python3 scripts/diagnose.py train.log", loaded=SKILL.name)
    assert LOG in no_files.output  # without a list, the directory's own files are named


def test_a_loaded_skill_is_not_asked_to_load_again_and_reloads_are_answered(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    model = ScriptedModel([f"```load\n{SKILL.name}\n```", f"```load\n{SKILL.name}\n```", "Fragmentation."])
    result = run_loop(model, task, CATALOG, LoopSettings())
    assert result.activated_skill == SKILL.name and result.extra["loads"] == [SKILL.name, SKILL.name]
    assert "do not load it again" in model.seen[2][-1]["content"]
    assert all("load it before answering" not in seen[0]["content"] for seen in model.seen[1:])


def test_forced_activation_gives_the_body_up_front_in_the_with_skill_condition_only(
    tmp_path: Path, staged: Path
) -> None:
    forced = LoopSettings(activation="forced")
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    model = ScriptedModel([run_block(f"python3 scripts/diagnose.py {LOG}"), "Fragmentation on rank 13."])
    result = run_loop(model, task, CATALOG, forced)
    first = model.seen[0][0]["content"]
    assert "## Failure Diagnosis" in first and "load it before answering" not in first
    assert result.activated_skill == SKILL.name and result.extra["loads"] == []
    assert result.extra["activation"] == "forced" and result.extra["tool_calls"][0]["exit_code"] == 0
    # without the skill, forced and discover show the model the same prompt
    seen = []
    for settings in (forced, LoopSettings()):
        other = tmp_path / settings.activation
        other.mkdir()
        bare = workdir_for(other, "frag-log-diagnosis", WITHOUT, staged)
        fake = ScriptedModel(["No idea."])
        run_loop(fake, bare, CATALOG, settings)
        seen.append(fake.seen)
    assert seen[0] == seen[1] and "## Failure Diagnosis" not in seen[0][0][0]["content"]


def test_output_cap_keeps_plan_memory_verdict_table_and_recommendation(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_memory.py prints ~7 kB: the capped output keeps the ranked table and the first
    step, and names the paragraphs it left out."""
    out = invoke("plan_memory", "--example").stdout
    assert len(out) > LoopSettings().output_cap  # otherwise this test proves nothing
    seen = cap(out, LoopSettings().output_cap)
    assert len(seen) <= LoopSettings().output_cap
    for needed in ("Changes that fit", "Recommended first step"):
        assert needed in seen and seen.count(needed) == out.count(needed)
    assert "recompute selective [core_attn, mlp] (adds mlp to selective [core_attn])" in seen  # a ranked row
    assert "characters cut: " in seen
    kept = out.split("\n\n")
    assert all(p in kept for p in seen.split("\n\n") if not p.startswith("[... "))  # whole paragraphs only


def test_every_file_slot_of_skill_md_is_answered_as_a_missing_file() -> None:
    """SKILL.md's commands name the user's files by CAPITALISED slots; an agent that runs a
    slot verbatim is told the real names (the list in tools.py must follow SKILL.md)."""
    import re

    from memtune.bench.tools import FILE_SLOTS

    slots = set(re.findall(r"\b[A-Z][A-Z_]*_(?:FILE|JSON|SCRIPT|YAML)\b", SKILL.body))
    assert slots and slots <= set(FILE_SLOTS), sorted(slots - set(FILE_SLOTS))


def test_a_repeated_command_is_answered_from_history_not_rerun(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    same = run_block("python3 scripts/check_env.py --env")
    model = ScriptedModel([same, same, "Set expandable segments."])
    result = run_loop(model, task, CATALOG, LoopSettings(activation="forced"))
    calls = result.extra["tool_calls"]
    assert [c["refused"] for c in calls] == [None, "repeat"] and calls[1]["exit_code"] is None
    assert "already ran" in model.seen[2][-2]["content"] and result.answer == "Set expandable segments."
    # the same helper on other input is not a repeat
    other = ScriptedModel(
        [
            "```run\npython3 scripts/diagnose.py - <<'EOF'\nCUDA out of memory. Tried to allocate 2.00 GiB\nEOF\n```",
            "```run\npython3 scripts/diagnose.py - <<'EOF'\nCUDA out of memory. Tried to allocate 4.00 GiB\nEOF\n```",
            "done",
        ]
    )
    (tmp_path / "b").mkdir()
    again = run_loop(other, workdir_for(tmp_path / "b", "frag-log-diagnosis", WITH, staged), CATALOG, LoopSettings())
    assert [c["refused"] for c in again.extra["tool_calls"]] == [None, None]


def test_a_repeated_command_makes_the_next_reply_the_last(tmp_path: Path, staged: Path) -> None:
    """Under harness 5 the 1.5B model repeated one command until its six turns ran out and
    its answer was the command; now the turn after a repeat asks for the answer and ends."""
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    same = run_block(f"python3 scripts/diagnose.py {LOG}")
    model = ScriptedModel([same] * 6)
    result = run_loop(model, task, CATALOG, LoopSettings(activation="forced", max_turns=6))
    assert result.extra["turns"] == 3 and len(model.seen) == 3
    assert model.seen[-1][-1]["content"] == FINAL_TURN and "already ran" in model.seen[-1][-2]["content"]
    assert [c["refused"] for c in result.extra["tool_calls"]] == [None, "repeat"]


def test_output_that_ran_asks_for_the_answer_and_a_failed_run_does_not(tmp_path: Path, staged: Path) -> None:
    from memtune.bench.loop import AFTER_OUTPUT

    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    model = ScriptedModel(
        [
            run_block("python3 scripts/estimate_memory.py --tp 0 --example"),  # exit 2: usage
            run_block(f"python3 scripts/diagnose.py {LOG}"),  # exit 0: it ran
            "Fragmentation on rank 13.",
        ]
    )
    result = run_loop(model, task, CATALOG, LoopSettings(activation="forced"))
    failed, ran = model.seen[1][-1]["content"], model.seen[2][-1]["content"]
    assert "exit code 2" in failed and AFTER_OUTPUT not in failed
    assert "exit code 0" in ran and ran.endswith(AFTER_OUTPUT)
    # the system message stays the same through the attempt (the cached prefix holds)
    assert model.seen[0][0] == model.seen[1][0] == model.seen[2][0]
    assert result.answer == "Fragmentation on rank 13."


def test_template_value_slots_are_refused_unrun_with_what_to_put_there(tmp_path: Path, staged: Path) -> None:
    task = workdir_for(tmp_path, "frag-log-diagnosis", WITH, staged)
    box = Sandbox(task.workdir, files=tuple(task.case.files))
    for command, slot in (
        ("python3 scripts/estimate_memory.py --preset MODEL --tp TP --pp PP --gpus N", "--preset MODEL"),
        ("python3 scripts/plan_memory.py --preset llama3-70b --tp=TP --gpus 32", "--tp TP"),
        ("python3 scripts/estimate_memory.py --preset llama3-70b --gpu-memory GPU_GiB", "--gpu-memory GPU_GiB"),
    ):
        call = box.run(command, loaded=SKILL.name)
        assert call.exit_code is None and call.refused == "placeholder" and call.to_json()["failed"]
        assert f"`{slot}`" in call.output and "user's own value" in call.output
    # real values in capitals are values, and a bare word that is no option's value is not a slot
    assert box.placeholder(["--gpu", "H200", "--symptom", "OOM", "--preset", "llama3-70b"]) is None
    assert box.placeholder(["--set", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]) is None
    assert box.placeholder(["MODEL"]) is None


def test_every_value_slot_the_instructions_and_next_steps_print_is_known() -> None:
    """The capitalised option values of SKILL.md's commands and of diagnose's next-step
    templates are the slots an agent copies; the loop must know each one."""
    import re

    import yaml

    from memtune.bench.tools import FILE_SLOTS, VALUE_SLOTS
    from memtune.diagnose.report import gpu_memory_flag, parallel_flags

    patterns = yaml.safe_load((REPO / "scripts" / "memtune" / "data" / "oom_patterns.yaml").read_text())
    steps = [
        str(k.get("next_step", ""))
        .replace("{parallel}", parallel_flags({}))
        .replace("{gpu_memory}", gpu_memory_flag(None))
        for k in patterns["kinds"].values()
    ]
    assert steps, "oom_patterns.yaml has no next_step templates: the test reads nothing"
    texts = [SKILL.body, *steps]
    values = {m for t in texts for m in re.findall(r"--[a-z][a-z0-9-]*[ =]([A-Z][^\s`'\"),;]*)", t)}
    slots = {v for v in values if re.fullmatch(r"[A-Z][A-Z_]*(?:GiB)?(?:\.\.[A-Z]+)?", v)}
    assert {"MODEL", "TP"} <= slots, sorted(slots)
    assert slots <= set(VALUE_SLOTS) | set(FILE_SLOTS), sorted(slots - set(VALUE_SLOTS) - set(FILE_SLOTS))


# ------------------------------------------------------------------ the allow-list follows SKILL.md
def _question_table_commands() -> list[str]:
    """The `Run` cells of SKILL.md's question -> command table."""

    text = (Path(__file__).resolve().parent.parent / "SKILL.md").read_text(encoding="utf-8")
    table = text.split("## Question → command", 1)[1].split("\n## ", 1)[0]
    return [row.split("|")[2] for row in table.splitlines() if row.startswith("| ") and "scripts/" in row]


def test_every_helper_the_question_table_names_may_run() -> None:
    """A helper SKILL.md tells the agent to run but the loop refuses measures the harness."""
    import re

    from memtune.bench.tools import HELPERS

    named = {m for cell in _question_table_commands() for m in re.findall(r"scripts/(\w+)\.py", cell)}
    assert named - {"sign_skill"} <= set(HELPERS), named - set(HELPERS)
    assert {"runtime_memory", "trace_regression"} <= named


def test_every_file_slot_of_the_question_table_is_answered_with_the_real_files(tmp_path: Path) -> None:
    import re

    from memtune.bench.tools import FILE_SLOTS

    slots = {s for cell in _question_table_commands() for s in re.findall(r"\b[A-Z][A-Z_]{2,}\b", cell)}
    file_like = {
        s for s in slots if s.endswith(("_FILE", "_JSON", "_SCRIPT", "_YAML", "_TXT")) or s in ("BEFORE", "AFTER")
    }
    assert file_like <= set(FILE_SLOTS), file_like - set(FILE_SLOTS)
    sandbox = Sandbox(tmp_path, 10.0, 6000, ("train_rank0.log",))
    assert sandbox.missing_file(["NVIDIA_SMI_TXT", "--gpu", "H200"]) == "NVIDIA_SMI_TXT"
