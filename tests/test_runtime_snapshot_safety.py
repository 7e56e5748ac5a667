"""A memory snapshot is untrusted: a pickle that would import or call anything is refused, and nothing runs.

Each hostile pickle's payload would create a marker file. The control test proves the payload
works (the standard unpickler, in a separate process, does create the marker); the reader
under test must refuse every variant with one line and exit 2, and the marker must never
appear. The benign real snapshot must decode to exactly what pickle itself would build.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from helper_cli import invoke
from memtune.errors import InputError
from memtune.runtime.snapshot import load_plain_pickle

DATA = Path(__file__).resolve().parent / "data" / "runtime-samples"


class _Touch:
    """Pickles as a call of ``os.system('touch MARKER')``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204 - pickle protocol
        return (os.system, (f"touch {self.marker}",))


class _Build:
    """Pickles as an object built with BUILD (its state applied by __setstate__)."""

    def __init__(self) -> None:
        self.x = 1


def hostile_pickles(marker: Path) -> dict[str, bytes]:
    """Every way a pickle can reach code, each shaped like a snapshot around the payload."""
    payload = {"segments": [], "device_traces": [], "trap": _Touch(marker)}
    out = {f"reduce-protocol-{p}": pickle.dumps(payload, protocol=p) for p in range(6)}
    command = f"touch {marker}".encode()
    # protocol 0 by hand: GLOBAL + REDUCE of os.system
    out["global-reduce-text"] = b"cos\nsystem\n(" + b"S'" + command + b"'\ntR."
    # INST: import and call in one opcode
    out["inst"] = b"(S'" + command + b"'\nios\nsystem\n."
    # OBJ: a class object on the stack called with arguments
    out["obj"] = b"(cos\nsystem\nS'" + command + b"'\no."
    # BUILD on an instance (would call __setstate__ / set attributes)
    out["build"] = pickle.dumps(_Build(), protocol=2)
    # copyreg extension code (an import through the registry)
    out["ext1"] = b"\x80\x02\x82\x01."
    # persistent id (the unpickler's persistent_load hook)
    out["persid"] = b"Pfoo\n."
    out["binpersid"] = b"\x80\x02X\x03\x00\x00\x00fooQ."
    # a plain-looking dict whose value is a STACK_GLOBAL reference to builtins.eval
    out["stack-global"] = (
        b"\x80\x04\x95\x1b\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01k\x94\x8c\x08builtins\x94\x8c\x04eval\x94\x93\x94s."
    )
    return out


def test_control_the_payload_runs_under_the_standard_unpickler(tmp_path: Path) -> None:
    # Without this, a marker that never appears would prove nothing.
    marker = tmp_path / "control-marker"
    blob = tmp_path / "control.pickle"
    blob.write_bytes(hostile_pickles(marker)["reduce-protocol-4"])
    subprocess.run(
        [sys.executable, "-c", f"import pickle; pickle.load(open({str(blob)!r}, 'rb'))"], check=False, timeout=60
    )
    assert marker.exists()


@pytest.mark.parametrize("variant", sorted(hostile_pickles(Path("/x"))))
def test_hostile_snapshot_is_refused_and_nothing_runs(tmp_path: Path, variant: str) -> None:
    marker = tmp_path / "marker"
    blob = tmp_path / "snapshot.pickle"
    blob.write_bytes(hostile_pickles(marker)[variant])
    result = invoke("runtime_memory", str(blob), "--json")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2
    assert len(lines) == 1 and lines[0].startswith("runtime_memory.py") and "error:" in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert ("refused" in lines[0]) or ("not a pickle of plain data" in lines[0]), lines[0]
    assert not marker.exists()


def test_hostile_pickle_without_a_snapshot_suffix_is_still_read_as_one(tmp_path: Path) -> None:
    # protocol >= 2 starts with 0x80: detected by content, never handed to the text reader
    marker = tmp_path / "marker"
    blob = tmp_path / "memory.bin"
    blob.write_bytes(hostile_pickles(marker)["reduce-protocol-2"])
    result = invoke("runtime_memory", str(blob))
    assert result.exit_code == 2 and "refused" in result.stderr and "os.system" in result.stderr.replace("posix", "os")
    assert not marker.exists()


def test_refusal_names_what_the_pickle_would_import(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"builtins\.eval"):
        load_plain_pickle(hostile_pickles(tmp_path / "m")["stack-global"], "s.pickle")


@pytest.mark.parametrize(
    "blob",
    [b"", b"\x80\x04", b"\x80\x04}\x94(", b"(K\x01K\x02K\x03d.", b"\x80\x02]q\x00(]q\x01ae}.", b"\xff"],
    ids=["empty", "no-stop", "cut", "odd-dict", "unhashable-key", "unknown-opcode"],
)
def test_corrupt_pickles_are_one_line_input_errors(blob: bytes) -> None:
    with pytest.raises(InputError):
        load_plain_pickle(blob, "bad.pickle")


def test_real_snapshot_decodes_to_its_known_structure() -> None:
    # Figures of the H200 snapshot (c01), noted when it was captured: 40 segments of 6060769280
    # bytes in all, 2054484480 bytes allocated, 1726 trace events, default allocator settings.
    value = load_plain_pickle((DATA / "h200-mcore" / "snapshot_c01_h1024_l4_gpt2.pickle").read_bytes(), "snapshot")
    assert set(value) == {"segments", "device_traces", "allocator_settings", "external_annotations"}
    assert len(value["segments"]) == 40
    assert sum(s["total_size"] for s in value["segments"]) == 6060769280
    assert sum(s["allocated_size"] for s in value["segments"]) == 2054484480
    assert len(value["device_traces"][0]) == 1726
    assert value["allocator_settings"]["expandable_segments"] is False
    assert value["segments"][0]["segment_pool_id"] == (0, 0)  # a tuple stays a tuple


@pytest.mark.parametrize("protocol", range(6))
def test_plain_values_round_trip_in_every_protocol(protocol: int) -> None:
    value = {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -(2**31), 2**31, 2**70, -(2**70)],
        "floats": [0.0, -1.5, 1e300],
        "text": ["", "ascii", "é☃", "x" * 300],
        "nested": ({"a": (1, 2)}, [None, True, False], ()),
    }
    value["shared"] = value["text"]  # memo references
    if protocol >= 3:
        value["bytes"] = [b"", b"\x00\xff" * 200]
    if protocol >= 4:
        value["sets"] = [{1, 2}, frozenset({3})]
    if protocol >= 5:
        value["bytearray"] = bytearray(b"abc")
    assert load_plain_pickle(pickle.dumps(value, protocol=protocol), "v") == value
