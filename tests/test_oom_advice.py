"""Evidence in the message changes the advice; the advice fits the release and the stack."""

from __future__ import annotations

from memtune.diagnose import advice as oom_advice
from memtune.diagnose import torch_era
from memtune.diagnose.evidence import load_evidence
from memtune.diagnose.frameworks import load_frameworks
from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.scan import numbered, scan_lines
from memtune.diagnose.torch_era import TorchRange

EV = load_evidence()
FW = load_frameworks()
STEP = "python3 scripts/plan_memory.py ..."


def judge(text: str, framework: str | None = None, rng: TorchRange | None = None):
    (f,) = scan_lines(numbered(text), load_patterns())
    fw = FW.by_name(framework) if framework else FW.default
    return f, oom_advice.judge(f, fw, EV, rng or f.torch or TorchRange(), STEP)


def new_msg(req: str, total: str, free: str, alloc: str, idle: str, extra: str = "") -> str:
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req}. GPU 0 has a total capacity of {total} of which "
        f"{free} is free. {extra}Of the allocated memory {alloc} is allocated by PyTorch, and {idle} is reserved by PyTorch "
        "but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )


def codes(v) -> set[str]:
    return {n.code for n in v.notes}


def test_several_processes_on_one_gpu_ask_for_a_device_binding_check() -> None:
    extra = "Process 11 has 10.00 GiB memory in use. Process 12 has 10.00 GiB memory in use. "
    f, v = judge(new_msg("2.00 GiB", "79.00 GiB", "1.00 MiB", "50.00 GiB", "100.00 MiB", extra))
    assert f.details["other_processes"] == 2 and f.details["other_processes_bytes"] == 20 << 30
    assert "several-processes" in codes(v)
    assert v.actions[0].startswith("Check device binding")


def test_one_listed_process_without_this_process_may_be_itself() -> None:
    f, v = judge(
        new_msg(
            "2.00 GiB", "79.00 GiB", "1.00 MiB", "50.00 GiB", "100.00 MiB", "Process 11 has 60.00 GiB memory in use. "
        )
    )
    (note,) = [n for n in v.notes if n.code == "other-process"]
    assert "namespaced" in note.text
    assert not v.actions[0].startswith("Check device binding")


def test_fragmentation_near_capacity_ranks_both_fixes() -> None:
    # idle 1.1x the request: fragmentation by the rule, but barely
    f, v = judge(new_msg("1.00 GiB", "79.00 GiB", "1.00 MiB", "70.00 GiB", "1.10 GiB"))
    assert f.kind == "fragmentation" and v.near_capacity
    assert "expandable_segments:True" in v.actions[0]
    assert v.actions[1].startswith("Also near capacity")
    assert v.confidence == "medium"
    # a request that is a large share of the GPU is near capacity too, however large the idle reserve
    f, v = judge(new_msg("30.00 GiB", "79.00 GiB", "1.00 MiB", "10.00 GiB", "60.00 GiB"))
    assert v.near_capacity and any("of the whole GPU" in n.text for n in v.notes)


def test_clear_fragmentation_is_high_confidence_and_one_fix() -> None:
    f, v = judge(new_msg("100.00 MiB", "79.00 GiB", "1.00 MiB", "70.00 GiB", "5.00 GiB"))
    assert (f.kind, v.confidence, v.near_capacity) == ("fragmentation", "high", False)
    assert len(v.actions) == 1


def test_tiny_gpu_with_nothing_free() -> None:
    _, v = judge(new_msg("64.00 MiB", "4.00 GiB", "0 bytes", "3.00 GiB", "10.00 MiB"))
    assert "tiny-gpu-full" in codes(v)
    _, v = judge(new_msg("64.00 MiB", "80.00 GiB", "0 bytes", "79.00 GiB", "10.00 MiB"))
    assert "tiny-gpu-full" not in codes(v)


def test_cuda_graph_capture_frame_above_the_error() -> None:
    text = (
        '  File ".../torch/cuda/graphs.py", line 84, in capture_end\n'
        "    super().capture_end()\n"
        "RuntimeError: CUDA error: out of memory\n"
    )
    f, v = judge(text)
    assert "cuda-graph-capture" in f.hints and "cuda-graph-capture" in codes(v)
    assert "capturing CUDA graphs" in v.actions[0]


def test_capture_frame_far_away_does_not_count() -> None:
    text = (
        '  File ".../torch/cuda/graphs.py", line 84, in capture_end\n'
        + "x\n" * 100
        + "RuntimeError: CUDA error: out of memory\n"
    )
    (f,) = [x for x in scan_lines(numbered(text), load_patterns())]
    assert "cuda-graph-capture" not in f.hints


def test_offending_allocator_config_token() -> None:
    _, v = judge("RuntimeError: Unrecognized CachingAllocator option: C")
    (note,) = [n for n in v.notes if n.code == "alloc-conf-token"]
    assert "'C'" in note.text and "fragment" in note.text
    _, v = judge("RuntimeError: Unrecognized CachingAllocator option: max_split_size_mb=8000")
    assert "colon" in next(n.text for n in v.notes if n.code == "alloc-conf-token")
    _, v = judge("ValueError: Expected 'True' or 'False' at index 19 in ConfigTokenizer but got 'true'")
    assert "True / False" in next(n.text for n in v.notes if n.code == "alloc-conf-token")


def test_release_that_rejects_expandable_segments_gets_what_works_there() -> None:
    text = new_msg("100.00 MiB", "79.00 GiB", "1.00 MiB", "70.00 GiB", "5.00 GiB")
    _, v = judge(text, rng=torch_era.exact("2.0.1"))
    assert "expandable_segments:True" not in " ".join(v.actions)
    assert "upgrade to >= 2.1" in v.actions[0] and "max_split_size_mb" in v.actions[0] and "cost" in v.actions[0]
    _, v = judge(text, rng=torch_era.exact("1.8"))
    assert "reads no allocator settings" in v.actions[0] and "max_split_size_mb:" not in v.actions[0]
    _, v = judge(text, rng=torch_era.exact("2.9"))
    assert "PYTORCH_ALLOC_CONF" in v.actions[0]


def test_platform_that_ignores_expandable_segments() -> None:
    text = "[W CUDAAllocatorConfig.h:28] Warning: expandable_segments not supported on this platform (function operator())\n"
    text += new_msg("100.00 MiB", "24.00 GiB", "1.00 MiB", "20.00 GiB", "5.00 GiB") + "\n"
    f = [x for x in scan_lines(numbered(text), load_patterns())][0]
    v = oom_advice.judge(f, FW.default, EV, f.torch, STEP)
    assert v.torch["expandable_segments"] == "ignored-on-platform"
    assert "max_split_size_mb" in v.actions[0] and "expandable_segments:True" not in v.actions[0]


def test_capacity_advice_is_the_stacks_own_knob() -> None:
    text = new_msg("10.00 GiB", "79.00 GiB", "1.00 MiB", "70.00 GiB", "100.00 MiB")
    _, v = judge(text, "vllm")
    assert "--gpu-memory-utilization" in v.actions[0] and "outside-megatron" in codes(v)
    _, v = judge(text, "megatron")
    assert v.actions == (STEP,) and "outside-megatron" not in codes(v)
    _, v = judge(text, "deepspeed")
    assert "ZeRO" in v.actions[0]


def test_expandable_caveat_of_the_stack_rides_along() -> None:
    _, v = judge(new_msg("100.00 MiB", "79.00 GiB", "1.00 MiB", "70.00 GiB", "5.00 GiB"), "vllm")
    assert "sleep mode" in v.actions[0]


def test_unrecognized_failure_asks_for_the_full_log() -> None:
    f, v = judge("[Bug]: CUDA OOM with Kimi-K2.5 NVFP4 on both TP4 and TP8")
    assert f.kind == "unrecognized-gpu-memory-error" and v.confidence == "low"
    assert "full log" in v.actions[0] and any("nvidia-smi" in a for a in v.actions)


def test_capture_frame_is_found_late_in_a_long_log() -> None:
    # many earlier hint lines must not crowd out the one right above a late failure
    text = "Capturing CUDA graph shapes: 10%\n" * 200 + "x\n" * 300
    text += '  File ".../torch/cuda/graphs.py", line 84, in capture_end\n' + "RuntimeError: CUDA error: out of memory\n"
    (f,) = scan_lines(numbered(text), load_patterns())
    assert "cuda-graph-capture" in f.hints
