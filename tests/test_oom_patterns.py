"""The pattern data file: well-formed, self-consistent, and grep sees what the prefilter sees."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from memtune.diagnose.patterns import ALLOCATOR_KINDS, PatternError, load_patterns

DESIGN_KINDS = {
    "fragmentation",
    "capacity",
    "impossible-request",
    "nccl-oom",
    "cublas-oom",
    "cuda-runtime-oom",
    "cpu-offload-pp",
    "nccl-ub-expandable",
    "cudagraph-nccl-register",
    "vpp-divisibility",
    "vpp-microbatches",
    "pp-divisibility",
    "alloc-conf-invalid",
    "alloc-conf-deprecated",
    "unrecognized-gpu-memory-error",  # issue 11: a GPU memory failure is never an empty report
    "host-oom",  # the node's CPU RAM ran out: an OOM-killer kill, not a GPU failure
    "xla-oom",  # issue 26: JAX/XLA's RESOURCE_EXHAUSTED never says "CUDA out of memory"
}
PATTERNS = load_patterns()


def test_kinds_are_exactly_design_md_kinds() -> None:
    assert set(PATTERNS.kinds) == DESIGN_KINDS
    assert set(ALLOCATOR_KINDS) <= DESIGN_KINDS


def test_priorities_put_config_errors_first_and_the_warning_last() -> None:
    pri = {k: v.priority for k, v in PATTERNS.kinds.items()}
    assert max(pri["cpu-offload-pp"], pri["pp-divisibility"]) < min(pri[k] for k in ALLOCATOR_KINDS)
    assert pri["alloc-conf-deprecated"] == max(pri.values())


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
def test_grep_pattern_matches_every_example_like_the_prefilter(tmp_path: Path) -> None:
    examples = [e for info in PATTERNS.kinds.values() for e in info.examples]
    noise = ["iteration 10 | loss 2.0", "NCCL INFO Channel 00/0 : 0 -> 1", "throughput 700 TFLOP/s"]
    f = tmp_path / "x.log"
    f.write_text("\n".join(examples + noise) + "\n", encoding="utf-8")
    res = subprocess.run(["grep", "-c", "-E", PATTERNS.grep_pattern(), str(f)], capture_output=True, text=True)
    assert res.stderr == ""  # no "stray \\" warnings: the escaping is plain ERE
    assert int(res.stdout) == len(examples) == sum(PATTERNS.has_trigger(e) for e in examples + noise)


@pytest.mark.parametrize(
    "text,match",
    [
        ("- just a list\n", "mapping"),
        ("triggers: [a]\nwindow_triggers: [a]\ndetectors: [{regex: x}]\nkinds: {}\n", "kind"),
        ("triggers: [a]\nwindow_triggers: [a]\ndetectors: [{kind: k, regex: '('}]\nkinds: {}\n", "malformed"),
        ("triggers: [a]\nwindow_triggers: [a]\ndetectors: [{kind: k, regex: a}]\nkinds: {}\n", "disagree"),
    ],
)
def test_malformed_pattern_file_names_the_file(tmp_path: Path, text: str, match: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(PatternError, match=match) as err:
        load_patterns(p)
    assert "bad.yaml" in str(err.value)
