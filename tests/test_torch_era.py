"""Which PyTorch printed a message, and what that release does with the allocator settings."""

from __future__ import annotations

import pytest

from memtune.diagnose import torch_era
from memtune.diagnose.evidence import load_evidence
from memtune.errors import InputError

EV = load_evidence()

NEW_21 = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a total capacty of 6.00 GiB "
    "of which 0 bytes is free. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation."
)
OLD_110 = (
    "RuntimeError: CUDA out of memory. Tried to allocate 12.00 MiB (GPU 0; 23.70 GiB total capacity; 1.10 GiB already allocated; "
    "10.56 MiB free; 1.18 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb"
)
CACHED = (
    "RuntimeError: CUDA out of memory. Tried to allocate 16.00 GiB (GPU 0; 11.93 GiB total capacity; 179.00 KiB cached)"
)
POOLS = "Of the allocated memory 22.43 GiB is allocated by PyTorch, with 74.00 MiB allocated in private pools (e.g., CUDA Graphs)"


@pytest.mark.parametrize(
    "text, since, before, status",
    [
        (NEW_21, (2, 1), (2, 2), "accepted"),
        (OLD_110, (1, 10), (2, 1), "rejected"),
        (CACHED, (1, 0), (1, 4), "ignored"),
        ("RuntimeError: cuda runtime error (2) : out of memory at THCStorage.cu:66", None, (1, 0), "ignored"),
        (POOLS, (2, 4), None, "accepted"),
        ("RuntimeError: CUDA error: out of memory", None, None, "unknown"),
    ],
)
def test_wording_dates_the_release(text: str, since, before, status: str) -> None:
    rng = torch_era.infer(text, EV)
    assert (rng.since, rng.before) == (since, before)
    assert torch_era.expandable_status(rng) == status
    assert rng.source == ("unknown" if since is None and before is None else "message format")


def test_reserved_total_without_hint_straddles_the_allocator_variable() -> None:
    rng = torch_era.infer(
        "(GPU 0; 10.76 GiB total capacity; 5.17 GiB already allocated; 4.48 GiB free; 5.28 GiB reserved in total by PyTorch)",
        EV,
    )
    assert (rng.since, rng.before) == ((1, 4), (2, 1))
    assert torch_era.expandable_status(rng) == "rejected"
    assert torch_era.max_split_available(rng) is None  # 1.4-1.9 do not read it, 1.10-2.0 do


def test_contradicting_markers_leave_the_range_open() -> None:
    rng = torch_era.infer(CACHED + " " + POOLS, EV)  # an edited paste: 1.0-1.3 and 2.4+ at once
    assert (rng.since, rng.before) == (None, None)
    assert any("disagree" in e for e in rng.evidence)


@pytest.mark.parametrize(
    "version, status",
    [("2.0.1", "rejected"), ("1.13", "rejected"), ("1.9", "ignored"), ("2.1", "accepted"), ("2.9.1+cu128", "accepted")],
)
def test_exact_version_decides(version: str, status: str) -> None:
    assert torch_era.expandable_status(torch_era.exact(version)) == status


def test_platform_warning_beats_the_release() -> None:
    assert torch_era.expandable_status(torch_era.exact("2.5"), platform_unsupported=True) == "ignored-on-platform"


def test_bad_version_is_a_one_line_input_error() -> None:
    with pytest.raises(InputError, match="not a version"):
        torch_era.exact("latest")


def test_rename_of_the_variable_from_2_9() -> None:
    assert torch_era.alloc_conf_rename_applies(torch_era.exact("2.9")) is True
    assert torch_era.alloc_conf_rename_applies(torch_era.infer(NEW_21, EV)) is False
    assert torch_era.alloc_conf_rename_applies(torch_era.infer(POOLS, EV)) is None


@pytest.mark.parametrize(
    "line, version",
    [
        ("PyTorch version: 2.5.1+cu124", (2, 5, 1)),  # collect_env.py
        ("- PyTorch version: 2.3.0+cu121 (GPU)", (2, 3, 0)),  # llamafactory-cli env
        ("- PyTorch version (GPU?): 1.5.1 (True)", (1, 5, 1)),  # transformers-cli env
        ("PyTorch version: Version: 2.9.0.dev20250721+cu126", (2, 9, 0)),
        ("[pip3] torch==2.6.0", (2, 6, 0)),
        ("torch                     1.13.1+cu117", (1, 13, 1)),  # pip list
        ("> torch                             2.4.0", (2, 4, 0)),
        ("[conda] pytorch                   2.1.0           py3.10_cuda12.1_cudnn8.9.2_0    pytorch", (2, 1, 0)),
        ("Running pytorch 2.2.2+cu121", (2, 2, 2)),  # printed by a training script (llm.c)
        ("torchaudio                0.13.1+cu117", None),
        ("torch-scatter             2.1.1+pt113cu117", None),
        ("import torch  # 2 GPUs", None),
    ],
)
def test_release_read_from_a_pasted_environment(line: str, version) -> None:
    from memtune.diagnose.patterns import load_patterns

    pats = load_patterns()
    assert pats.has_trigger(line) or version is None
    assert torch_era.stated_version(pats.run_facts(line)) == version


def test_stated_release_refines_the_wording_or_yields_to_it() -> None:
    wording = torch_era.TorchRange(since=(2, 2, 0), evidence=("expandable_segments hint",))
    kept = torch_era.with_stated(wording, (2, 5, 1))
    assert (kept.exact, kept.source) == ((2, 5, 1), "stated in the input")
    # a listing that contradicts the message (another machine's environment) is not believed
    other = torch_era.with_stated(wording, (1, 13, 1))
    assert (other.exact, other.since, other.source) == (None, (2, 2, 0), "message format")
    assert "contradicts" in other.evidence[-1]
    assert torch_era.with_stated(wording, None) is wording
