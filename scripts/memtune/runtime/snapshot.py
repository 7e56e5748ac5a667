"""PyTorch memory snapshots (``torch.cuda.memory._dump_snapshot``), read without trusting them.

A snapshot is a pickle, and a pickle is a program: the standard unpickler imports modules
and calls whatever the file names, so a file handed to us as "my snapshot" could run any
code. The snapshot format itself only ever holds dicts, lists, tuples, strings, numbers,
booleans and None. So this module does not use :mod:`pickle` at all: it is a small stack
machine that knows only the opcodes that build those values. The first opcode that would
import a name (GLOBAL, STACK_GLOBAL), call or construct something (REDUCE, BUILD, INST, OBJ,
NEWOBJ, NEWOBJ_EX), consult a registry (EXT1/2/4, PERSID) or take an out-of-band buffer ends
the read with one line saying what the file tried, and nothing in it has run.

Then :func:`summarize` reads the allocator's state from the plain data: segments, the
reserve that is free, the largest free block, and the live allocations grouped by the
frame that made them.
"""

from __future__ import annotations

import codecs
import struct
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memtune.errors import InputError
from memtune.runtime.model import FrameGroup, SnapshotSummary

#: Refuse larger files: the decoded objects take several times the file's size in memory.
MAX_SNAPSHOT_BYTES = 1 << 30
_MAX_LENGTH = MAX_SNAPSHOT_BYTES

_REFUSED = {
    ord("c"): ("GLOBAL", "import a name"),
    0x93: ("STACK_GLOBAL", "import a name"),
    ord("R"): ("REDUCE", "call a function"),
    ord("b"): ("BUILD", "set an object's state (calls __setstate__)"),
    ord("i"): ("INST", "import and call a class"),
    ord("o"): ("OBJ", "call a class"),
    0x81: ("NEWOBJ", "construct an object"),
    0x92: ("NEWOBJ_EX", "construct an object"),
    0x82: ("EXT1", "look up a registered extension (an import)"),
    0x83: ("EXT2", "look up a registered extension (an import)"),
    0x84: ("EXT4", "look up a registered extension (an import)"),
    ord("P"): ("PERSID", "load a persistent object"),
    ord("Q"): ("BINPERSID", "load a persistent object"),
    0x97: ("NEXT_BUFFER", "take an out-of-band buffer"),
    0x98: ("READONLY_BUFFER", "take an out-of-band buffer"),
}

_FIX = "dump the snapshot again with torch.cuda.memory._dump_snapshot(PATH)"


class _Mark:
    """The MARK sentinel on the stack."""


_MARK = _Mark()


def _refuse(source: str, message: str) -> InputError:
    return InputError(f"{source}: {message}")


def load_plain_pickle(data: bytes, source: str) -> Any:
    """The value a pickle of plain data describes; InputError for anything else.

    Supports protocols 0-5 for None/bool/int/float/str/bytes/bytearray/list/tuple/dict/set/
    frozenset and the memo. Never imports, never calls: see the module docstring.
    """
    view = memoryview(data)
    n = len(data)
    pos = 0
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}

    def take(k: int) -> memoryview:
        nonlocal pos
        if k < 0 or k > _MAX_LENGTH or pos + k > n:
            raise _refuse(source, f"truncated or corrupt pickle at byte {pos} (wants {k} bytes); {_FIX}")
        chunk = view[pos : pos + k]
        pos += k
        return chunk

    def line() -> bytes:
        nonlocal pos
        end = data.find(b"\n", pos)
        if end < 0:
            raise _refuse(source, f"truncated pickle at byte {pos}; {_FIX}")
        text = data[pos:end]
        pos = end + 1
        return text

    def pop_mark() -> list[Any]:
        if not marks:
            raise _refuse(source, f"corrupt pickle (no MARK) at byte {pos}; {_FIX}")
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    def pairs(items: list[Any]) -> list[Any]:
        if len(items) % 2:
            raise _refuse(source, f"corrupt pickle (a key without a value) at byte {pos}; {_FIX}")
        return items

    def top() -> Any:
        if not stack:
            raise _refuse(source, f"corrupt pickle (empty stack) at byte {pos}; {_FIX}")
        return stack[-1]

    try:
        while True:
            if pos >= n:
                raise _refuse(source, f"truncated pickle (no STOP opcode); {_FIX}")
            at = pos
            op = data[pos]
            pos += 1
            if op in _REFUSED:
                name, what = _REFUSED[op]
                target = ""
                if op == ord("c"):
                    module, _, attr = (line() + b" " + line()).decode("utf-8", "replace").partition(" ")
                    target = f" {module}.{attr}"
                elif op == 0x93 and len(stack) >= 2 and all(isinstance(s, str) for s in stack[-2:]):
                    target = f" {stack[-2]}.{stack[-1]}"
                raise _refuse(
                    source,
                    f"refused: this pickle would {what}{target} (opcode {name} at byte {at}); a memory "
                    f"snapshot holds only plain data, so nothing in it was run; {_FIX}",
                )
            if op == 0x80:  # PROTO
                take(1)
            elif op == 0x95:  # FRAME
                take(8)
            elif op == ord("."):  # STOP
                if len(stack) != 1 or marks:
                    raise _refuse(source, f"corrupt pickle (stack of {len(stack)} at STOP); {_FIX}")
                return stack[0]
            elif op == ord("("):
                marks.append(len(stack))
            elif op == ord("0"):
                stack.pop()
            elif op == ord("1"):
                pop_mark()
            elif op == ord("2"):
                stack.append(top())
            elif op == ord("N"):
                stack.append(None)
            elif op == 0x88:
                stack.append(True)
            elif op == 0x89:
                stack.append(False)
            elif op == ord("I"):
                text = line()
                stack.append(True if text == b"01" else False if text == b"00" else int(text))
            elif op == ord("L"):
                stack.append(int(line().rstrip(b"L")))
            elif op == ord("J"):
                stack.append(struct.unpack("<i", take(4))[0])
            elif op == ord("K"):
                stack.append(take(1)[0])
            elif op == ord("M"):
                stack.append(struct.unpack("<H", take(2))[0])
            elif op == 0x8A:
                stack.append(int.from_bytes(take(take(1)[0]), "little", signed=True))
            elif op == 0x8B:
                stack.append(int.from_bytes(take(struct.unpack("<i", take(4))[0]), "little", signed=True))
            elif op == ord("F"):
                stack.append(float(line()))
            elif op == ord("G"):
                stack.append(struct.unpack(">d", take(8))[0])
            elif op == ord("S"):
                text = line().strip()
                if len(text) < 2 or text[:1] not in (b"'", b'"') or text[-1:] != text[:1]:
                    raise _refuse(source, f"corrupt STRING at byte {at}; {_FIX}")
                stack.append(codecs.escape_decode(text[1:-1])[0].decode("latin-1"))
            elif op == ord("T"):
                stack.append(bytes(take(struct.unpack("<i", take(4))[0])).decode("latin-1"))
            elif op == ord("U"):
                stack.append(bytes(take(take(1)[0])).decode("latin-1"))
            elif op == ord("V"):
                stack.append(line().decode("raw-unicode-escape"))
            elif op == ord("X"):
                stack.append(str(take(struct.unpack("<I", take(4))[0]), "utf-8", "surrogatepass"))
            elif op == 0x8C:
                stack.append(str(take(take(1)[0]), "utf-8", "surrogatepass"))
            elif op == 0x8D:
                stack.append(str(take(struct.unpack("<Q", take(8))[0]), "utf-8", "surrogatepass"))
            elif op == ord("B"):
                stack.append(bytes(take(struct.unpack("<I", take(4))[0])))
            elif op == ord("C"):
                stack.append(bytes(take(take(1)[0])))
            elif op == 0x8E:
                stack.append(bytes(take(struct.unpack("<Q", take(8))[0])))
            elif op == 0x96:
                stack.append(bytearray(take(struct.unpack("<Q", take(8))[0])))
            elif op == ord("]"):
                stack.append([])
            elif op == ord(")"):
                stack.append(())
            elif op == ord("}"):
                stack.append({})
            elif op == 0x8F:
                stack.append(set())
            elif op == ord("l"):
                stack.append(pop_mark())
            elif op == ord("t"):
                stack.append(tuple(pop_mark()))
            elif op == 0x85:
                stack[-1:] = [(stack[-1],)]
            elif op == 0x86:
                stack[-2:] = [(stack[-2], stack[-1])]
            elif op == 0x87:
                stack[-3:] = [(stack[-3], stack[-2], stack[-1])]
            elif op == ord("d"):
                items = pairs(pop_mark())
                stack.append(dict(zip(items[::2], items[1::2], strict=True)))
            elif op == ord("a"):
                value = stack.pop()
                top().append(value)
            elif op == ord("e"):
                items = pop_mark()
                top().extend(items)
            elif op == ord("s"):
                value = stack.pop()
                key = stack.pop()
                top()[key] = value
            elif op == ord("u"):
                items = pairs(pop_mark())
                target = top()
                for key, value in zip(items[::2], items[1::2], strict=True):
                    target[key] = value
            elif op == 0x90:
                items = pop_mark()
                top().update(items)
            elif op == 0x91:
                stack.append(frozenset(pop_mark()))
            elif op == ord("p"):
                memo[int(line())] = top()
            elif op == ord("q"):
                memo[take(1)[0]] = top()
            elif op == ord("r"):
                memo[struct.unpack("<I", take(4))[0]] = top()
            elif op == 0x94:
                memo[len(memo)] = top()
            elif op == ord("g"):
                stack.append(memo[int(line())])
            elif op == ord("h"):
                stack.append(memo[take(1)[0]])
            elif op == ord("j"):
                stack.append(memo[struct.unpack("<I", take(4))[0]])
            else:
                raise _refuse(source, f"not a pickle of plain data (unknown opcode 0x{op:02x} at byte {at}); {_FIX}")
    except InputError:
        raise
    except (IndexError, KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError, struct.error) as exc:
        raise _refuse(source, f"corrupt pickle near byte {pos} ({type(exc).__name__}); {_FIX}") from exc


def read_snapshot(path: Path, source: str) -> Any:
    """The plain value stored in the snapshot file ``path`` (size-checked, never executed)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"{source}: cannot read ({exc.strerror or exc})") from exc
    if size > MAX_SNAPSHOT_BYTES:
        raise InputError(
            f"{source}: snapshot of {size / (1 << 30):.1f} GiB is larger than the 1 GiB this reader holds in memory; "
            "dump it with fewer trace entries (_record_memory_history(max_entries=...))"
        )
    with path.open("rb") as handle:
        return load_plain_pickle(handle.read(), source)


# ---------------------------------------------------------------------- summary

_NO_STACK = "(no stack recorded: call torch.cuda.memory._record_memory_history() before building the model)"


def _frame_label(frames: Any) -> str | None:
    """The first frame outside PyTorch's own code: the line of user or Megatron code that
    asked for the memory (PyTorch's frames only say *how* it was allocated)."""
    if not isinstance(frames, list):
        return None
    fallback = None
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        filename = str(frame.get("filename", ""))
        label = f"{filename}:{frame.get('line', '?')} {frame.get('name', '?')}"
        fallback = fallback or label
        internal = (
            "/torch/" in filename
            or filename.startswith("torch/")
            or filename.endswith((".cpp", ".h", ".cu", ".cuh"))
            or filename in ("??", "")
            or filename.startswith("<frozen")
        )
        if not internal:
            return label
    return fallback


def _segments(value: Any, source: str) -> tuple[list[dict[str, Any]], list[Any], dict[str, Any]]:
    traces: list[Any] = []
    settings: dict[str, Any] = {}
    if isinstance(value, dict) and isinstance(value.get("segments"), list):
        if isinstance(value.get("device_traces"), list):
            traces = value["device_traces"]
        if isinstance(value.get("allocator_settings"), dict):
            settings = value["allocator_settings"]
        segments = value["segments"]
    elif isinstance(value, list):
        segments = value  # torch.cuda.memory_snapshot(): the segment list alone
    else:
        raise InputError(
            f"{source}: a pickle of plain data, but not a memory snapshot (no 'segments' list); "
            "dump one with torch.cuda.memory._dump_snapshot(PATH)"
        )
    good = [s for s in segments if isinstance(s, dict) and isinstance(s.get("blocks", []), list)]
    return good, traces, settings


def _trace_frames(traces: Iterable[Any], device: int) -> dict[int, Any]:
    """Address -> frames of the allocation still live at that address, from the recorded
    history (blocks themselves carry no frames when recording began after they were made)."""
    live: dict[int, Any] = {}
    if not isinstance(traces, list) or device >= len(traces) or not isinstance(traces[device], list):
        return live
    for event in traces[device]:
        if not isinstance(event, dict):
            continue
        action, addr = event.get("action"), event.get("addr")
        if not isinstance(addr, int):
            continue
        if action == "alloc":
            live[addr] = event.get("frames")
        elif action in ("free_completed", "free"):
            live.pop(addr, None)
    return live


def summarize(value: Any, source: str, top: int = 8) -> list[SnapshotSummary]:
    """One summary per device in the snapshot."""
    segments, traces, settings = _segments(value, source)
    by_device: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for segment in segments:
        device = segment.get("device", 0)
        by_device[device if isinstance(device, int) else 0].append(segment)
    summaries = []
    for device, segs in sorted(by_device.items()):
        trace_frames = _trace_frames(traces, device)
        reserved = allocated = free = largest_free = free_blocks = 0
        groups: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        expandable: bool | None = None
        for segment in segs:
            reserved += int(segment.get("total_size", 0) or 0)
            if isinstance(segment.get("is_expandable"), bool):
                expandable = bool(expandable) or segment["is_expandable"]
            for block in segment.get("blocks", []):
                if not isinstance(block, dict):
                    continue
                size = int(block.get("size", 0) or 0)
                state = block.get("state")
                if state == "inactive":
                    free += size
                    free_blocks += 1
                    largest_free = max(largest_free, size)
                elif state in ("active_allocated", "active_pending_free"):
                    allocated += size
                    frames = block.get("frames")
                    if not frames and isinstance(block.get("history"), list) and block["history"]:
                        last = block["history"][-1]
                        frames = last.get("frames") if isinstance(last, dict) else None
                    if not frames:
                        frames = trace_frames.get(block.get("address", -1))
                    label = _frame_label(frames) or _NO_STACK
                    group = groups[label]
                    group[0] += size
                    group[1] += 1
                    group[2] = max(group[2], size)
        if expandable is None and isinstance(settings.get("expandable_segments"), bool):
            expandable = settings["expandable_segments"]
        ranked = sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]
        trace_entries = len(traces[device]) if device < len(traces) and isinstance(traces[device], list) else 0
        summaries.append(
            SnapshotSummary(
                source=source,
                device=device,
                segments=len(segs),
                reserved_bytes=reserved,
                allocated_bytes=allocated,
                free_bytes=free,
                largest_free_block_bytes=largest_free,
                free_blocks=free_blocks,
                expandable_segments=expandable,
                top_allocations=tuple(FrameGroup(label, g[0], g[1], g[2]) for label, g in ranked),
                trace_entries=trace_entries,
            )
        )
    return summaries
