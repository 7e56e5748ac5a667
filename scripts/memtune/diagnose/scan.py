"""Turn log lines into findings: which failure, where, and with which numbers.

The scanner is fed the candidate lines of memtune.diagnose.log_reader (a hit line and the lines
after it) and keeps, per rank stream, at most one allocator message that is still being
re-joined: PyTorch's OOM text is often wrapped over several lines, and with several ranks
writing to one file the continuation of rank 3's message can sit between rank 5's lines.
Everything else is a one-line match.  Identical failures of one source (retries, the
same NCCL warning per channel) fold into one finding with an occurrence count, so a
5 GB log gives a short report.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache

from memtune.diagnose import parse as oom_parse
from memtune.diagnose import rejoin as oom_rejoin
from memtune.diagnose import torch_era
from memtune.diagnose.evidence import Evidence, load_evidence
from memtune.diagnose.frameworks import FrameworkHits, FrameworkSet, load_frameworks
from memtune.diagnose.log_reader import WINDOW_LINES, LinePrefix, cut_head_source, nccl_origin, strip_prefixes
from memtune.diagnose.patterns import Detector, PatternSet
from memtune.diagnose.torch_era import TorchRange

MAX_MESSAGE_LINES = 10  # an allocator message never spans more lines than this
# The longest line the scanner parses.  PyTorch's longest OOM message is ~1.5 KB; a longer
# line (a JSON record, a minified dump, an attack) is cut to a window around its first
# trigger, so the work per line is bounded whatever the line's length.
MAX_LINE_CHARS = 16 << 10
LINE_LEAD_CHARS = 1 << 10  # kept before the trigger (exception name, rank prefix)
ADOPT_WORDING_SHARE = 0.6  # an unlabelled line continues another rank's message if mostly its words
BENIGN_CACHE = 4096  # distinct benign trigger lines remembered (bounded memory)
BENIGN_LINE_MAX = 512  # longer lines are not remembered
DETECT_CACHE = 4096  # distinct texts whose detection / allocator verdict is remembered
EVIDENCE_CHARS = 600
_OOM_START = re.compile(
    r"(?:CUDA|HIP) out of memory|cuda runtime error \(2\) : out of memory|Tried to allocate|\(GPU \d+; [\d.]+ ?[KMGT]?i?B total capacity"
)
# The message's own opening words (not "Tried to allocate" alone): a line with them starts a
# message; a line whose allocator match lacks them continues a message whose opening a wrap cut.
_FULL_START = re.compile(r"(?:CUDA|HIP) out of memory|cuda runtime error \(2\) : out of memory|total capac")
# Ray folds repeats of a line into one with this suffix; the failure is still the same one.
_RAY_REPEAT = re.compile(r"\s*\[repeated (\d+)x across cluster\]")
RECENT_HINT_LINES = 8  # per hint kind: the latest lines seen, to place a failure that follows them
_CALLOC = re.compile(r"Failed to CUDA calloc (\d+) bytes")
_EXC_NAME = re.compile(r"[\w.]*(?:Error|Exception|Wrapper)\)?:?\s*\(?\w*\)?\s*$")
_NEW_STATEMENT = re.compile(r"^(?:Traceback |\s*File \"|frame #\d|Exception raised from )")


# (kind, source, device, numbers, evidence with its digits stripped): one failure, however often printed
DedupeKey = tuple[str, str, int | None, tuple[tuple[str, int | None], ...], str]


@dataclass(frozen=True)
class Finding:
    """One failure seen in the log.  ``numbers`` keys are AllocatorNumbers' fields (bytes or None)."""

    kind: str
    evidence: str
    line: int
    file: str
    rank: int | None = None
    device: int | None = None
    host: str | None = None
    pid: int | None = None
    numbers: dict[str, int | None] = field(default_factory=dict)
    details: dict[str, int] = field(default_factory=dict)
    line_end: int | None = None
    occurrences: int = 1
    note: str | None = None
    hints: tuple[str, ...] = ()  # evidence lines near this failure (data/oom_evidence.yaml)
    note_is_advice: bool = False  # the note is the engine's own fix (replaces generic advice)
    torch: TorchRange | None = None  # releases whose message wording this is (allocator OOMs)
    signal_only: bool = False  # only a SIGKILL was seen, not who sent it (data/oom_patterns.yaml)

    @property
    def source(self) -> str:
        """Who failed, as precisely as the log says: rank, else host:pid, else device."""
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.host is not None and self.pid is not None:
            return f"{self.host}:{self.pid}"
        if self.host is not None and self.device is not None:
            return f"{self.host} GPU {self.device}"
        if self.host is not None:
            return self.host
        if self.device is not None:
            return f"GPU {self.device}"
        return self.file

    def dedupe_key(self) -> DedupeKey:
        return (self.kind, self.source, self.device, tuple(sorted(self.numbers.items())), _strip_digits(self.evidence))


@lru_cache(maxsize=DETECT_CACHE)
def _strip_digits(text: str) -> str:
    """The text with every number as ``#`` (remembered: a retry loop repeats one evidence)."""
    return re.sub(r"\d+", "#", _RAY_REPEAT.sub("", text))


def empty_numbers() -> dict[str, int | None]:
    return oom_parse.AllocatorNumbers().as_json()


@dataclass
class _Pending:
    prefix: LinePrefix
    parts: list[str]
    first_line: int
    last_line: int
    file: str
    # A cut head ("torch.OutOfMemoryError: CUDA o"): what the line alone was, emitted instead
    # if no continuation ever completes the message's opening words.
    cut_head: bool = False
    fallback: tuple[Detector, re.Match[str]] | None = None

    def text(self) -> str:
        parts = tuple(self.parts)
        if sum(map(len, parts)) <= MEMO_CHARS:
            return _joined(parts)
        return oom_rejoin.join(parts)


MEMO_CHARS = 4096  # texts up to this size are remembered (bounded: 1024 entries of 4 KB at most)


@lru_cache(maxsize=1024)
def _joined(parts: tuple[str, ...]) -> str:
    """``oom_rejoin.join``, remembered: a retry loop re-joins the same pieces every time."""
    return oom_rejoin.join(parts)


def _complete(text: str) -> bool:
    return _complete_memo(text) if len(text) <= MEMO_CHARS else oom_parse.is_complete(text)


@lru_cache(maxsize=1024)
def _complete_memo(text: str) -> bool:
    return oom_parse.is_complete(text)


ASYNC_PARSER = "cuda-malloc-async"  # data/oom_patterns.yaml ``numbers_from`` value


@dataclass
class _Tail:
    """The lines after a one-line detection that still carry its numbers."""

    index: int  # position of the finding in Scanner.findings
    parts: list[str]
    last_line: int
    until: int


class Scanner:
    """Stateful line consumer; call :meth:`feed` per candidate line, then :meth:`finish`."""

    def __init__(
        self,
        patterns: PatternSet,
        file: str,
        frameworks: FrameworkSet | None = None,
        evidence: Evidence | None = None,
    ) -> None:
        self.patterns = patterns
        self.file = file
        self.frameworks = frameworks or load_frameworks()
        self.evidence = evidence or load_evidence()
        self.framework_hits = FrameworkHits()
        self.hint_lines: dict[str, deque[int]] = {}  # hint name -> latest line numbers seen
        self.pending: dict[str, _Pending] = {}
        self.findings: list[Finding] = []
        self._index: dict[DedupeKey, int] = {}  # dedupe key -> position in findings
        self.run_facts: dict[str, int] = {}  # latest parallel layout the log printed
        self._last_line = 0
        self._benign: set[bytes | str] = set()
        self._triggered: dict[
            bytes | str, bool
        ] = {}  # line -> holds a trigger (bounded)  # trigger lines that matched nothing (exact text)
        self._detections: dict[str, tuple[Detector, re.Match[str]] | None] = {}
        self._verdicts: dict[str, tuple[oom_parse.AllocatorNumbers, oom_parse.Verdict, dict[str, int], TorchRange]] = {}
        self._cut_head = re.compile(cut_head_source(patterns.window_triggers))
        self._tail: _Tail | None = None  # a field list still being read (cudaMallocAsync)
        self._repeats: dict[int, int] = {}  # position in findings -> further occurrences (applied at finish)

    def wants_more(self) -> bool:
        """Is a message still being read (the prefilter keeps reading its window)?"""
        return bool(self.pending) or self._tail is not None

    # -- input
    def feed(self, line_no: int, raw: bytes | str) -> None:
        if line_no != self._last_line + 1 and self.pending:
            self._flush_all()  # a gap: no message continues across lines we never saw
        self._last_line = line_no
        if not self.pending and self._tail is None:
            # Nothing is being re-joined, so only a line with a trigger can matter, and not
            # one already known to match nothing: real logs repeat their benign trigger lines
            # (every rank echoing the same allocator setting, NCCL its environment, at every
            # restart), and a dense log is mostly those.
            if raw in self._benign or not self._has_trigger(raw):
                return
            if self._feed(line_no, raw) and len(self._benign) < BENIGN_CACHE and len(raw) <= BENIGN_LINE_MAX:
                self._benign.add(raw)
            return
        self._feed(line_no, raw)

    def _feed(self, line_no: int, raw: bytes | str) -> bool:
        """Process one line; True when it was a trigger line that matched nothing at all."""
        text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else raw
        if len(text) > MAX_LINE_CHARS:
            text = self._bound(text)
        prefix = strip_prefixes(text)
        body = prefix.text
        key = prefix.stream_key
        triggered = self._has_trigger(body)
        detected = self._detect(body) if triggered else None
        if self._tail is not None and self._continue_tail(line_no, body, detected):
            return False
        # framework signals are idempotent, but a hint's line number matters (it must sit
        # near the failure), so a hint line is never cached as benign
        hinted = self._observe_context(line_no, text) if triggered else False

        if detected is not None and detected[0].is_allocator and self.pending and not _FULL_START.search(body):
            # "ut of memory. Tried to allocate ...": the rest of a cut head being re-joined
            head = self._cut_head_pending(prefix)
            if head is not None:
                key, detected = head, None
        pend = self.pending.get(key)
        if pend is None and detected is None and self.pending:
            adopted = self._adopter(prefix, body, line_no)
            if adopted is not None:
                key, pend = adopted
        if pend is not None and detected is None:
            if self._continues(pend, body, line_no):
                pend.parts.append(body)
                pend.last_line = line_no
                if _complete(pend.text()):
                    self._emit_allocator(self.pending.pop(key))
                return False
            self._emit_allocator(self.pending.pop(key))
        elif pend is not None:
            self._emit_allocator(self.pending.pop(key))
        self._expire(line_no)
        if detected is None or not detected[0].is_allocator:
            cut = self._cut_head.search(body)
            if cut is not None:
                lead = _exception_lead(body, body.index(":", cut.start()) + 1)
                self.pending[key] = _Pending(
                    prefix=prefix,
                    parts=[lead],
                    first_line=line_no,
                    last_line=line_no,
                    file=self.file,
                    cut_head=True,
                    fallback=detected,
                )
                return False
        if detected is None:
            if triggered:
                facts = self.patterns.run_facts(body)
                self.run_facts.update(facts)
                return not facts and not hinted
            return False
        det, match = detected
        if det.is_allocator:
            start = _OOM_START.search(body)
            lead = _exception_lead(body, start.start() if start else match.start())
            pend = _Pending(prefix=prefix, parts=[lead], first_line=line_no, last_line=line_no, file=self.file)
            if _complete(pend.text()):
                self._emit_allocator(pend)
            else:
                self.pending[key] = pend
            return False
        self._emit_simple(det, body, prefix, line_no)
        return False

    def finish(self) -> list[Finding]:
        self._flush_all()
        for i, extra in self._repeats.items():
            self.findings[i] = replace(self.findings[i], occurrences=self.findings[i].occurrences + extra)
        self._repeats.clear()
        # hints that apply wherever they are in the input (a platform warning at start-up)
        anywhere = tuple(
            h.name for h in self.evidence.hints if h.within_lines_before is None and h.name in self.hint_lines
        )
        if anywhere:
            self.findings = [replace(f, hints=tuple(dict.fromkeys(f.hints + anywhere))) for f in self.findings]
        return self.findings

    def _has_trigger(self, text: bytes | str) -> bool:
        """``patterns.has_trigger_in``, remembered per exact short line: one search over ~90
        literals costs ~10 us, and a retry loop feeds the same window lines again and again."""
        got = self._triggered.get(text)
        if got is None:
            got = self.patterns.has_trigger_in(text)
            if len(self._triggered) < DETECT_CACHE and len(text) <= BENIGN_LINE_MAX:
                self._triggered[text] = got
        return got

    # -- context: framework signals and evidence hints (not failures themselves)
    def _observe_context(self, line_no: int, text: str) -> bool:
        """Record framework signals and evidence hints; True when the line held a hint."""
        self.frameworks.observe(text, self.framework_hits)
        names = self.evidence.hints_in(text)
        for name in names:
            self.hint_lines.setdefault(name, deque(maxlen=RECENT_HINT_LINES)).append(line_no)
        return bool(names)

    def _near_hints(self, f: Finding) -> tuple[str, ...]:
        """Hints seen shortly before (or inside) this failure: a traceback frame above it."""
        end = f.line_end or f.line
        names = []
        for hint in self.evidence.hints:
            window = hint.within_lines_before
            lines = self.hint_lines.get(hint.name)
            if window is not None and lines and any(f.line - window <= ln <= end for ln in lines):
                names.append(hint.name)
        return tuple(names)

    # -- helpers
    def _detect(self, body: str) -> tuple[Detector, re.Match[str]] | None:
        """``patterns.detect``, remembered per exact text: a retry loop prints the same
        failure thousands of times (bounded, so memory stays flat)."""
        if body in self._detections:
            return self._detections[body]
        found = self.patterns.detect(body)
        if len(self._detections) < DETECT_CACHE and len(body) <= BENIGN_LINE_MAX:
            self._detections[body] = found
        return found

    def _bound(self, text: str) -> str:
        """A window of MAX_LINE_CHARS around the first trigger of an over-long line."""
        hits = [i for i in (text.find(t.decode("utf-8", "replace")) for t in self.patterns.triggers) if i != -1]
        start = max(0, min(hits) - LINE_LEAD_CHARS) if hits else 0
        return text[start : start + MAX_LINE_CHARS]

    def _continues(self, pend: _Pending, body: str, line_no: int) -> bool:
        stripped = body.strip()
        if not stripped or _NEW_STATEMENT.match(body):
            return False
        # Bounded by the first line, the same window the streaming reader reads after it,
        # so a streamed scan and a scan of every line give identical findings.
        return len(pend.parts) < MAX_MESSAGE_LINES and line_no - pend.first_line <= WINDOW_LINES

    def _adopter(self, prefix: LinePrefix, body: str, line_no: int) -> tuple[str, _Pending] | None:
        """The pending message of another stream that a line without its own rank continues.

        Launchers and loggers often label only a message's first line (``[rank5]:``,
        ``5: ``), so its continuations arrive with no rank, possibly between other ranks'
        lines.  Such a line may continue any pending message of a compatible stream (no
        conflicting rank or host); it goes to the one whose grammar it advances most (a
        number completed, the closing clause reached), else, when it reads as allocator
        wording at all, to the most recently started one.  A line that does neither
        (a progress bar, another program's output) continues nothing.
        """
        if prefix.rank is not None:
            return None
        candidates = [
            (k, p)
            for k, p in self.pending.items()
            if (prefix.host is None or prefix.host == p.prefix.host) and self._continues(p, body, line_no)
        ]
        if not candidates:
            return None
        best, best_gain = None, 0
        for k, p in candidates:
            gain = oom_rejoin.progress(oom_rejoin.join([*p.parts, body])) - oom_rejoin.progress(p.text())
            if gain > best_gain:
                best, best_gain = (k, p), gain
        if best is not None:
            return best
        if oom_rejoin.wording_share(body) >= ADOPT_WORDING_SHARE:
            return max(candidates, key=lambda kp: kp[1].first_line)
        return None

    def _cut_head_pending(self, prefix: LinePrefix) -> str | None:
        """The key of a pending cut head this line's stream may continue (same stream, or
        an unlabelled line and any compatible stream's head), else None."""
        own = self.pending.get(prefix.stream_key)
        if own is not None and own.cut_head and len(own.parts) == 1:
            return prefix.stream_key
        if prefix.rank is not None:
            return None
        heads = [
            (p.first_line, k)
            for k, p in self.pending.items()
            if p.cut_head and len(p.parts) == 1 and (prefix.host is None or prefix.host == p.prefix.host)
        ]
        return max(heads)[1] if heads else None

    def _expire(self, line_no: int) -> None:
        for key in [k for k, p in self.pending.items() if line_no - p.first_line > WINDOW_LINES]:
            self._emit_allocator(self.pending.pop(key))

    def _flush_all(self) -> None:
        for key in list(self.pending):
            self._emit_allocator(self.pending.pop(key))

    def _emit_allocator(self, pend: _Pending) -> None:
        text = pend.text()
        if pend.cut_head and not _FULL_START.search(text):
            # nothing completed the cut opening words: the line is what it was on its own
            if pend.fallback is not None:
                self._emit_simple(pend.fallback[0], pend.parts[0], pend.prefix, pend.first_line)
            return
        cached = self._verdicts.get(text)
        if cached is None:
            # Everything that depends on the text alone, remembered: a retry loop prints the
            # same message thousands of times.
            nums = oom_parse.parse_allocator_message(text)
            cached = (nums, oom_parse.classify(nums), oom_parse.breakdown(text), torch_era.infer(text, self.evidence))
            if len(self._verdicts) < DETECT_CACHE:
                self._verdicts[text] = cached
        nums, verdict, details, torch = cached
        self._add(
            Finding(
                kind=verdict.kind,
                evidence=_clip(text),
                line=pend.first_line,
                line_end=pend.last_line if pend.last_line != pend.first_line else None,
                file=pend.file,
                rank=pend.prefix.rank,
                host=pend.prefix.host,
                device=nums.device,
                numbers=nums.as_json(),
                details=dict(details),
                note=verdict.note,
                torch=torch,
            )
        )

    def _emit_simple(self, det: Detector, body: str, prefix: LinePrefix, line_no: int) -> None:
        kind, numbers_rx = str(det.kind), det.numbers
        folded = self._fold(kind, prefix, line_no, det.fold_lines, body) if det.fold_lines else None
        if folded is not None:
            prev = self.findings[folded]
            if prev.signal_only and not det.signal_only:
                # the OOM killer's own line names the sender of the SIGKILL seen just before
                self._index.pop(prev.dedupe_key(), None)
                self.findings[folded] = replace(prev, signal_only=False, note=det.note)
                self._index.setdefault(self.findings[folded].dedupe_key(), folded)
            self._numbers_in_text(det, folded, body, line_no)
            return
        numbers = empty_numbers()
        details: dict[str, int] = {}
        origin = nccl_origin(body) if kind == "nccl-oom" else None
        host = prefix.host
        pid = device = None
        if origin:
            host, pid, device = str(origin["host"]), int(origin["pid"]), int(origin["device"])
        if numbers_rx is not None:
            m = numbers_rx.search(body)
            if m:
                # one-letter suffixes (_b, _c) let regex alternatives reuse a group name
                details = {re.sub(r"_[b-z]$", "", k): int(v) for k, v in m.groupdict().items() if v is not None}
        if "requested_bytes" in details:  # a size the message states (XLA): the finding's own number
            numbers["requested_bytes"] = details.pop("requested_bytes")
        calloc = _CALLOC.search(body) if kind == "nccl-oom" else None
        if calloc:
            numbers["requested_bytes"] = int(calloc.group(1))
            # NCCL prints "Cuda failure 'out of memory'" and then, a line or two later from
            # the same thread, the size it failed to calloc: one failure, not two.
            for i in range(len(self.findings) - 1, max(-1, len(self.findings) - 4), -1):
                prev = self.findings[i]
                if (
                    prev.kind == "nccl-oom"
                    and prev.file == self.file
                    and prev.host == host
                    and prev.pid == pid
                    and prev.numbers.get("requested_bytes") is None
                    and line_no - (prev.line_end or prev.line) <= 4
                ):
                    merged = dict(prev.numbers, requested_bytes=numbers["requested_bytes"])
                    self._index.pop(prev.dedupe_key(), None)
                    self.findings[i] = replace(
                        prev, numbers=merged, line_end=line_no, evidence=_clip(prev.evidence + " | " + body.strip())
                    )
                    self._index.setdefault(self.findings[i].dedupe_key(), i)
                    return
        i = self._add(
            Finding(
                kind=kind,
                evidence=_clip(body.strip()),
                line=line_no,
                file=self.file,
                rank=prefix.rank,
                host=host,
                pid=pid,
                device=device,
                numbers=numbers,
                details=details,
                note=det.note,
                note_is_advice=det.note_is_advice,
                signal_only=det.signal_only,
            )
        )
        self._numbers_in_text(det, i, body, line_no)

    # -- a message whose numbers follow on the next lines (cudaMallocAsync's field list)
    def _numbers_in_text(self, det: Detector, i: int, text: str, line_no: int) -> None:
        """Read the numbers ``det`` names (``numbers_from``) out of ``text`` into finding ``i``
        (filling only what it does not know yet), and keep reading the next
        ``numbers_follow`` lines while the message is incomplete."""
        if det.numbers_from != ASYNC_PARSER:
            return
        self._merge_async(i, text)
        if det.numbers_follow and not oom_parse.async_message_complete(text):
            self._tail = _Tail(index=i, parts=[text], last_line=line_no, until=line_no + det.numbers_follow)
        else:
            self._tail = None

    def _merge_async(self, i: int, text: str) -> None:
        nums, extra = oom_parse.parse_async_message(text)
        prev = self.findings[i]
        merged = {k: (v if v is not None else nums.as_json().get(k)) for k, v in prev.numbers.items()}
        details = {**extra, **prev.details}
        if merged != prev.numbers or details != prev.details:
            self._index.pop(prev.dedupe_key(), None)
            self.findings[i] = replace(prev, numbers=merged, details=details)
            self._index.setdefault(self.findings[i].dedupe_key(), i)

    def _continue_tail(self, line_no: int, body: str, detected: object) -> bool:
        """Take ``body`` as the next line of the open field list, if it is one."""
        tail = self._tail
        if tail is None:
            return False
        if detected is not None or line_no != tail.last_line + 1 or line_no > tail.until or not body.strip():
            self._tail = None
            return False
        tail.parts.append(body.strip())
        tail.last_line = line_no
        text = " ".join(tail.parts)
        self._merge_async(tail.index, text)
        prev = self.findings[tail.index]
        self.findings[tail.index] = replace(
            prev, line_end=line_no, evidence=_clip(prev.evidence + " | " + body.strip())
        )
        if oom_parse.async_message_complete(text):
            self._tail = None
        return True

    def _fold(self, kind: str, prefix: LinePrefix, line_no: int, window: int, body: str) -> int | None:
        """Merge into the previous finding of ``kind`` from the same source if it is close
        (its position in ``findings``, else None)."""
        for i in range(len(self.findings) - 1, max(-1, len(self.findings) - 4), -1):
            prev = self.findings[i]
            if prev.kind != kind or prev.file != self.file or prev.rank != prefix.rank or prev.host != prefix.host:
                continue
            if line_no - (prev.line_end or prev.line) > window:
                return None
            said = {_strip_digits(part.strip()) for part in prev.evidence.split(" | ")}
            if _strip_digits(body.strip()) in said:
                return None  # the same line again: a repeat (counted by _add), not a continuation
            self._index.pop(prev.dedupe_key(), None)
            self.findings[i] = replace(prev, line_end=line_no, evidence=_clip(prev.evidence + " | " + body.strip()))
            self._index.setdefault(self.findings[i].dedupe_key(), i)
            return i
        return None

    def _add(self, finding: Finding) -> int:
        # A dict, not a scan of the list: a long log can hold thousands of distinct findings.
        # A repeat only counts (applied in finish, not a dataclass copy per repeat); hints are
        # looked up for a new finding only (a repeat keeps the first one's).
        key = finding.dedupe_key()
        i = self._index.get(key)
        if i is not None:
            self._repeats[i] = self._repeats.get(i, 0) + finding.occurrences
            return i
        self._index[key] = len(self.findings)
        self.findings.append(replace(finding, hints=self._near_hints(finding)))
        return len(self.findings) - 1


def _exception_lead(body: str, oom_at: int) -> str:
    """Keep the exception name in the evidence (``torch.OutOfMemoryError: CUDA out of ...``)."""
    lo = max(0, oom_at - 200)  # an exception name is short; bound the backtracking
    m = _EXC_NAME.search(body[lo:oom_at])
    return body[lo + m.start() :] if m else body[oom_at:]


def _clip(text: str) -> str:
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def scan_lines(lines: Iterable[tuple[int, bytes | str]], patterns: PatternSet, file: str = "<input>") -> list[Finding]:
    """Findings of already-selected ``(line_number, text)`` pairs (tests, small inputs)."""
    scanner = Scanner(patterns, file)
    for line_no, raw in lines:
        scanner.feed(line_no, raw)
    return scanner.finish()


def numbered(text: str, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """``(line_number, line)`` pairs of a text, for :func:`scan_lines`."""
    yield from enumerate(text.splitlines(), start=first_line)
