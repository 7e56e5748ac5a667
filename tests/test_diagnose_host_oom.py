"""Host (CPU RAM) out-of-memory kills: recognised, never sent to GPU fixes, honestly rated.

Samples 119-132 and 72 in tests/data/oom-samples are real public texts (SOURCE.md): kills the
OOM killer reports itself (kernel, Slurm cgroup, Ray, Kubernetes), kills that show only the
SIGKILL (torchrun / DeepSpeed exit -9, a DataLoader worker, bash's "Killed"), and look-alikes
that are not host OOM (the NCCL watchdog's SIGABRT, torchrun's own SIGKILL at shutdown, srun
exit codes after a GPU OOM).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.report import build_report
from memtune.diagnose.scan import Scanner, numbered
from memtune.diagnose.table import load_rows

SAMPLES = Path(__file__).resolve().parent / "data" / "oom-samples"
P = load_patterns()

# the OOM killer (or Ray's memory monitor, or the container runtime) says so itself
EXPLICIT = (
    "72_openrlhf_issue911_ray_host_memory_not_gpu.txt",
    "120_verl_issue2950_ray_node_low_on_memory_workerdict.txt",
    "121_tranx_issue41_dmesg_out_of_memory_killed_process.txt",
    "122_arjuna_users_issue52_slurm_oom_kill_event_bash_killed.txt",
    "123_nextflow_issue5932_slurm_oom_kill_step_tasks_out_of_memory.txt",
    "124_openpai_issue5464_k8s_oomkilled_code_137.txt",
    "127_wmpo_issue3_raylet_workers_killed_memory_pressure.txt",
)
# only the SIGKILL is visible
SIGNAL_ONLY = (
    "119_chatglm2_issue525_exitcode_minus9_loading_checkpoint_shards.txt",
    "125_deepspeed_issue3232_sigkill_handler_return_code_minus9.txt",
    "126_open_sora_plan_issue512_sigterm_then_exitcode_minus9_saving.txt",
    "128_pytorch_book_issue62_dataloader_worker_killed_by_signal.txt",
    "129_hedwig_issue70_bare_killed_after_progress_bar.txt",
)
GPU_ADVICE = ("expandable_segments", "plan_memory.py", "estimate_memory.py", "nvidia-smi", "recompute", "micro_batch")


def body(name: str) -> str:
    lines = (SAMPLES / name).read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# source: https://github.com/")
    return "\n".join(lines[1:])


def report(text: str, name: str = "log") -> dict:
    scanner = Scanner(P, name)
    for n, line in numbered(text):
        scanner.feed(n, line)
    found = scanner.finish()
    return build_report(found, load_rows(), P, [name], framework_hits={name: scanner.framework_hits})


def kinds(rep: dict) -> list[str]:
    return [f["kind"] for f in rep["findings"]]


def test_host_oom_is_a_memory_failure_but_not_of_the_gpu() -> None:
    info = P.kinds["host-oom"]
    assert info.memory_failure and info.memory == "host" and not info.gpu_memory_failure
    assert all(P.kinds[k].gpu_memory_failure for k in ("fragmentation", "capacity", "cuda-runtime-oom", "nccl-oom"))
    # after every GPU kind: with a GPU OOM in the same log, the GPU OOM leads
    gpu_tiers = [v.priority // 10 for v in P.kinds.values() if v.gpu_memory_failure]
    assert info.priority // 10 > max(gpu_tiers)


@pytest.mark.parametrize("name", EXPLICIT)
def test_the_oom_killers_own_report_is_high_confidence(name: str) -> None:
    rep = report(body(name), name)
    (f,) = rep["findings"]
    assert f["kind"] == "host-oom" and f["confidence"]["level"] == "high"
    assert "note" not in f  # no "only a SIGKILL" caveat


@pytest.mark.parametrize("name", SIGNAL_ONLY)
def test_a_bare_sigkill_is_host_oom_with_medium_confidence(name: str) -> None:
    rep = report(body(name), name)
    (f,) = rep["findings"]
    assert f["kind"] == "host-oom" and f["confidence"]["level"] == "medium"
    assert "scheduler" in f["confidence"]["why"] and "SIGKILL" in f["note"]


@pytest.mark.parametrize("name", EXPLICIT + SIGNAL_ONLY)
def test_host_advice_names_host_knobs_and_no_gpu_fix(name: str) -> None:
    (f,) = report(body(name), name)["findings"]
    text = " ".join([*f["advice"], f["next_step"], f["fix"]] + [n["text"] for n in f["evidence_notes"]])
    for gpu in GPU_ADVICE:
        assert gpu not in text, gpu
    for knob in ("use_cpu_initialization", "num_workers", "optimizer_offload_fraction", "torch_dist", "--mem"):
        assert knob in text, knob
    assert "dmesg" in f["confirm"] and "sacct" in f["confirm"]


def test_bash_killed_then_slurms_oom_kill_is_one_explicit_kill() -> None:
    # the weak line comes first; the OOM killer's line right after it names the sender
    (f,) = report(body("122_arjuna_users_issue52_slurm_oom_kill_event_bash_killed.txt"))["findings"]
    assert f["confidence"]["level"] == "high" and "oom-kill event" in f["evidence"]


@pytest.mark.parametrize(
    "name",
    [
        "130_picotron_issue6_nccl_watchdog_timeout_exitcode_minus6.txt",  # SIGABRT from the NCCL watchdog
        "131_aws_eks_issue93_launcher_forced_sigkill_on_shutdown.txt",  # torchrun's own SIGKILL at teardown
    ],
)
def test_other_signals_and_the_launchers_own_kill_are_not_host_oom(name: str) -> None:
    assert kinds(report(body(name), name)) == []


def test_srun_exit_codes_after_a_gpu_oom_stay_a_gpu_finding() -> None:
    assert kinds(report(body("132_everyvoice_issue178_cuda_oom_then_srun_task_exits.txt"))) == ["fragmentation"]


def test_sigkills_after_a_gpu_oom_are_its_consequence() -> None:
    # a GPU OOM followed by torchrun's -9 (two real texts, one log): the GPU OOM is the finding
    gpu = body("132_everyvoice_issue178_cuda_oom_then_srun_task_exits.txt")
    kill = body("126_open_sora_plan_issue512_sigterm_then_exitcode_minus9_saving.txt")
    assert kinds(report(gpu + "\n" + kill)) == ["fragmentation"]
    # ... whichever comes first in the log
    assert kinds(report(kill + "\n" + gpu)) == ["fragmentation"]


def test_an_explicit_host_kill_beside_a_gpu_oom_is_kept_after_it() -> None:
    gpu = body("132_everyvoice_issue178_cuda_oom_then_srun_task_exits.txt")
    kernel = body("121_tranx_issue41_dmesg_out_of_memory_killed_process.txt")
    assert kinds(report(kernel + "\n" + gpu)) == ["fragmentation", "host-oom"]


def test_a_host_kill_does_not_hide_an_unrecognized_gpu_failure() -> None:
    # drop_last_resort drops the unrecognized kind only beside a GPU failure
    text = "RuntimeError: CUDA driver error: out of memory\n" + body(
        "120_verl_issue2950_ray_node_low_on_memory_workerdict.txt"
    )
    assert sorted(kinds(report(text))) == ["host-oom", "unrecognized-gpu-memory-error"]


@pytest.mark.parametrize(
    "text",
    [
        '"OOMKilled": false,',  # docker inspect's field
        "[2024-04-10 16:04:34,970] torch.distributed.elastic.multiprocessing.api: [WARNING] Unable to shutdown process 264 "
        "via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL",
        "  exitcode  : -6 (pid: 3437)",
        "  exitcode  : -90 (pid: 3437)",
        "srun: error: ib12gpu-002: task 4: Exited with exit code 1",
        "Killed 3 stale workers before restart",
    ],
)
def test_look_alikes(text: str) -> None:
    assert kinds(report(text)) == []


@pytest.mark.parametrize(
    "text,level",
    [
        ("kubelet: pod trainer-gpu-0 OOMKilled", "high"),
        ("Memory cgroup out of memory: Killed process 4242 (python) total-vm:1kB", "high"),
        (
            "[Mon Jun  3 10:00:00 2024] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0",
            "high",
        ),
        ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL", "medium"),
        ("[1]+  Killed                  python train.py", "medium"),
        ("command terminated with exit code 137", "medium"),
    ],
)
def test_other_wordings(text: str, level: str) -> None:
    (f,) = report(text)["findings"]
    assert (f["kind"], f["confidence"]["level"]) == ("host-oom", level)
