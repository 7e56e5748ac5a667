"""Read ``PYTORCH_CUDA_ALLOC_CONF`` / ``PYTORCH_ALLOC_CONF`` the way PyTorch itself does.

Why a re-implementation: a malformed allocator string only fails when the first CUDA
tensor is allocated, i.e. minutes into a multi-node job, and PyTorch's reason ("stoi",
"Expected a single True/False argument ...") is cryptic. We reproduce PyTorch's tokenizer
and per-key checks for each parser generation so a launch script can be judged before
it runs, with PyTorch's own message plus the fix.

Three generations (``data/alloc_conf.yaml`` ``eras``):

* ``split`` (1.10-1.13): split on whitespace/commas, then on colons; an item without a
  colon is silently ignored.
* ``lexer`` (2.0-2.8): tokens are split at ``, : [ ]``; only the space character is
  dropped (a tab stays inside the token); a missing ``:`` or ``,`` is an error.
* ``tokenizer`` (2.9+): every ``isspace`` character is dropped; a shared pass
  (AcceleratorAllocatorConfig) then a CUDA pass read the tokens; separators are
  *not* checked any more (``checkToken`` only checks bounds), so ``expandable_segments,True``
  is accepted.

Everything here is stdlib-only at import time (the YAML table is loaded lazily).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from memtune.errors import InputError
from memtune.files.data_yaml import load_data_mapping
from memtune.files.paths import DATA_DIR

Version = tuple[int, ...]

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")
_UINT64 = 1 << 64
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT_PREFIX = re.compile(r"^[ \t\n\r\f\v]*([+-]?)(\d+)")
_FLOAT_PREFIX = re.compile(
    r"^[ \t\n\r\f\v]*([+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))", re.IGNORECASE
)


def parse_version(text: str | None, what: str = "--torch-version") -> Version | None:
    """``"2.9.1+cu128"`` -> ``(2, 9, 1)``; ``None`` stays ``None`` (unknown version)."""
    if text is None or str(text).strip() == "":
        return None
    match = _VERSION_RE.match(str(text))
    if not match:
        raise InputError(f"{what} {text!r} is not a version like 2.5 or 2.9.1; give MAJOR.MINOR[.PATCH]")
    return tuple(int(part) for part in match.groups() if part is not None)


def version_str(version: Version | None) -> str:
    return "unknown" if version is None else ".".join(map(str, version))


@lru_cache(maxsize=1)
def table() -> Mapping[str, Any]:
    """The allocator facts (keys, versions, PyTorch's messages) from data/alloc_conf.yaml."""
    return load_data_mapping(DATA_DIR / "alloc_conf.yaml")


def _v(text: str) -> Version:
    parsed = parse_version(text)
    assert parsed is not None
    return parsed


def table_version(key: str) -> Version:
    """A release the table names under ``key`` (e.g. es_with_split_or_gc_fixed_in)."""
    return _v(str(table()[key]))


def era_of(version: Version) -> str:
    name = str(table()["eras"][0]["name"])
    for era in table()["eras"]:
        if version >= _v(era["from"]):
            name = str(era["name"])
    return name


class _Reject(Exception):
    """PyTorch would raise: the message is PyTorch's own reason."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Verdict:
    """What one PyTorch release does with the string."""

    version: Version
    era: str
    accepted: bool
    reason: str | None = None  # PyTorch's message when rejected
    exception: str | None = None  # the Python exception type PyTorch raises
    key: str | None = None  # the option the rejection is about, when known
    settings: Mapping[str, Any] = field(default_factory=dict)  # last value wins, as in PyTorch
    notes: tuple[str, ...] = ()  # accepted but worth knowing (silently ignored parts, ...)


@dataclass(frozen=True)
class AllocConf:
    """A parsed allocator string, judged under one release or (unknown version) several."""

    text: str
    torch_version: Version | None
    verdicts: tuple[Verdict, ...]

    @property
    def accepted(self) -> bool:
        return all(v.accepted for v in self.verdicts)

    @property
    def rejections(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.accepted)

    @property
    def expandable_segments(self) -> bool:
        """True when every release judged would turn expandable segments on."""
        return all(v.accepted and v.settings.get("expandable_segments") is True for v in self.verdicts)

    @property
    def has_whitespace(self) -> bool:
        return any(ch.isspace() for ch in self.text)

    @property
    def megatron_guard_sees_expandable(self) -> bool:
        """Megatron-LM's guards test ``"expandable_segments:True" in value`` literally."""
        return "expandable_segments:True" in self.text


# --------------------------------------------------------------------------- tokenizers


def tokenize(text: str, era: str) -> list[str]:
    """PyTorch's token list for ``text`` (lexer and tokenizer eras)."""
    tokens: list[str] = []
    buf: list[str] = []
    drop_all_space = era == "tokenizer"
    for ch in text:
        if ch in ",:[]":
            if buf:
                tokens.append("".join(buf))
                buf = []
            tokens.append(ch)
        elif (ch.isspace() and ch.isascii()) if drop_all_space else ch == " ":
            continue
        else:
            buf.append(ch)
    if buf:
        tokens.append("".join(buf))
    return tokens


# --------------------------------------------------------------------- C++ conversions


def _cpp_int(value: str, func: str, key: str, msgs: Mapping[str, str]) -> int:
    """std::stoi / std::stoull: leading digits are read, the rest is ignored."""
    match = _INT_PREFIX.match(value)
    if not match:
        raise _Reject(msgs["not_a_number"].format(token=func, func=func, value=value, key=key), key)
    number = int(match.group(1) + match.group(2))
    if func == "stoi":
        if not _INT32_MIN <= number <= _INT32_MAX:
            raise _Reject(msgs["not_a_number"].format(token=func, func=func, value=value, key=key), key)
        return number % _UINT64  # assigned to size_t: negatives wrap
    if int(match.group(2)) >= _UINT64:
        raise _Reject(msgs["not_a_number"].format(token=func, func=func, value=value, key=key), key)
    return number % _UINT64


def _cpp_double(value: str, key: str, msgs: Mapping[str, str]) -> float:
    match = _FLOAT_PREFIX.match(value)
    if not match:
        raise _Reject(msgs["not_a_number"].format(token="stod", func="stod", value=value, key=key), key)
    try:
        return float(match.group(1))
    except (ValueError, OverflowError):  # pragma: no cover - regex admits only float syntax
        raise _Reject(msgs["not_a_number"].format(token="stod", func="stod", value=value, key=key), key) from None


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


# ------------------------------------------------------------------------- era parsers


class _Parser:
    """Shared state of one pass over the tokens."""

    def __init__(self, tokens: list[str], version: Version, era: str) -> None:
        self.t = tokens
        self.version = version
        self.era = era
        self.msgs: Mapping[str, str] = table()["messages"][era]
        self.options: Mapping[str, Any] = table()["options"]
        self.settings: dict[str, Any] = {}
        self.notes: list[str] = []

    # token access -----------------------------------------------------------------
    def tok(self, i: int) -> str:
        if i >= len(self.t):
            if self.era == "tokenizer":
                raise _Reject(self.msgs["out_of_bounds"])
            raise _Reject(self.msgs["expected_token"].format(expected="a value"))
        return self.t[i]

    def expect(self, i: int, sep: str, key: str | None = None) -> None:
        if self.era == "tokenizer":
            self.tok(i)  # 2.9+ only checks the index, not the separator itself
            return
        if i >= len(self.t) or self.t[i] != sep:
            raise _Reject(self.msgs["expected_token"].format(expected=sep), key)

    def value(self, i: int, key: str) -> str:
        if self.era == "lexer" and i >= len(self.t):
            raise _Reject(self.msgs["missing_value"].format(key=key), key)
        return self.tok(i)

    def known(self, key: str) -> bool:
        spec = self.options.get(key)
        return spec is not None and self.version >= _v(spec["since"])

    # values -------------------------------------------------------------------------
    def read_bool(self, i: int, key: str) -> bool:
        if i >= len(self.t) or self.t[i] not in ("True", "False"):
            got = self.t[i] if i < len(self.t) else ""
            if self.era == "tokenizer":
                if i >= len(self.t):
                    raise _Reject(self.msgs["out_of_bounds"], key)
                raise _Reject(self.msgs["bool"].format(index=i, value=got), key)
            raise _Reject(self.msgs["bool"].format(key=key), key)
        return self.t[i] == "True"

    def read_value(self, i: int, key: str) -> Any:
        """Check the value at ``i`` for ``key``; return (value, index of its last token)."""
        kind = self.options[key]["kind"]
        msgs = self.msgs
        to_int = "stoull" if self.era == "tokenizer" else "stoi"
        if kind == "bool":
            return self.read_bool(i, key), i
        raw = self.value(i, key)
        if kind in ("split_size", "non_split_size"):
            number = _cpp_int(raw, to_int, key, msgs)
            strict = self.era != "tokenizer" and kind == "split_size"
            too_small = number <= 20 if strict else number < 20
            if too_small:
                raise _Reject(msgs["max_split_small" if kind == "split_size" else "max_non_split_small"], key)
            return number, i
        if kind == "fraction_open":
            fraction = _cpp_double(raw, key, msgs)
            if self.era == "tokenizer":
                if not 0.0 < fraction < 1.0:
                    raise _Reject(msgs["gc_range"], key)
            else:
                if not fraction > 0:
                    raise _Reject(msgs["gc_small"], key)
                if not fraction < 1.0:
                    raise _Reject(msgs["gc_big"], key)
            return fraction, i
        if kind == "fraction_closed":
            fraction = _cpp_double(raw, key, msgs)
            if not 0.0 <= fraction <= 1.0:
                raise _Reject(msgs["fraction_range"], key)
            return fraction, i
        if kind == "backend":
            if raw not in ("native", "cudaMallocAsync"):
                raise _Reject(msgs["backend"], key)
            return raw, i
        if kind == "threads":
            number = _cpp_int(raw, to_int, key, msgs)
            if not _pow2(number):
                raise _Reject(msgs["threads_pow2"].format(value=number), key)
            if number > 128:
                raise _Reject(msgs["threads_max"].format(value=number), key)
            return number, i
        if kind == "positive_size":
            number = _cpp_int(raw, to_int, key, msgs)
            if number == 0:
                raise _Reject(msgs["reserve_positive"], key)
            return number, i
        if kind == "roundup":
            return self.read_roundup(i, key)
        raise AssertionError(f"unknown kind {kind}")  # pragma: no cover - data error

    def read_roundup(self, i: int, key: str) -> tuple[Any, int]:
        msgs = self.msgs
        to_int = "stoull" if self.era == "tokenizer" else "stoi"
        spec = self.options[key]
        raw = self.value(i, key)
        if raw != "[":
            number = _cpp_int(raw, to_int, key, msgs)
            if not _pow2(number):
                raise _Reject(msgs["roundup_pow2"], key)
            return number, i
        if self.version < _v(spec["list_since"]):  # pragma: no cover - split era handles its own
            raise _Reject(msgs["roundup_pow2"], key)
        zero_ok = self.version >= _v(spec["zero_division_since"])
        pairs: list[tuple[str, int]] = []
        while True:
            i += 1
            if i >= len(self.t):
                if self.era == "tokenizer":
                    raise _Reject(msgs["unclosed"], key)
                # lexer era: the loop just stops at the end of the tokens (no error)
                self.notes.append("roundup_power2_divisions list has no closing ']'")
                return tuple(pairs), i
            if self.t[i] == "]":
                return tuple(pairs), i
            interval = self.t[i]
            self.expect(i + 1, ":", key)
            i += 2
            divisions = _cpp_int(self.value(i, key), to_int, key, msgs)
            if not (_pow2(divisions) or (zero_ok and divisions == 0)):
                raise _Reject(msgs["roundup_pow2_or_0" if zero_ok else "roundup_pow2"], key)
            if interval != ">":
                boundary = _cpp_int(interval, "stoull" if self.era == "tokenizer" else "stoul", key, msgs)
                if not _pow2(boundary):
                    raise _Reject(msgs["roundup_interval"], key)
            pairs.append((interval, divisions))
            if i + 1 >= len(self.t):
                if self.era == "tokenizer":
                    raise _Reject(msgs["out_of_bounds"], key)
                raise _Reject(msgs["roundup_unterminated"], key)
            if self.t[i + 1] != "]":
                self.expect(i + 1, ",", key)
                i += 1

    def skip_key(self, i: int) -> int:
        """Tokenizer era: step over an option another pass owns (ConfigTokenizer::skipKey)."""
        self.tok(i + 1)
        i += 2
        if self.tok(i) != "[":
            return i
        while True:
            i += 1
            if i >= len(self.t):
                raise _Reject(self.msgs["unclosed"])
            if self.t[i] == "]":
                return i


def _run_lexer(tokens: list[str], version: Version) -> _Parser:
    p = _Parser(tokens, version, "lexer")
    i = 0
    while i < len(tokens):
        key = tokens[i]
        if not p.known(key):
            raise _Reject(p.msgs["unknown_key"].format(key=key), key)
        p.expect(i + 1, ":", key)
        value, i = p.read_value(i + 2, key)
        p.settings[key] = value
        if i + 1 < len(tokens):
            p.expect(i + 1, ",", key)
            i += 1
        i += 1
    return p


def _run_tokenizer(tokens: list[str], version: Version) -> _Parser:
    """2.9+: the shared pass first (skips CUDA keys), then the CUDA pass (skips shared keys)."""
    p = _Parser(tokens, version, "tokenizer")
    for shared_pass in (True, False):
        i = 0
        while i < len(tokens):
            key = tokens[i]
            spec = p.options.get(key)
            mine = spec is not None and p.known(key) and bool(spec.get("shared")) == shared_pass
            if mine:
                p.tok(i + 1)
                value, i = p.read_value(i + 2, key)
                p.settings[key] = value
            elif shared_pass or p.known(key):
                i = p.skip_key(i)
            else:
                raise _Reject(p.msgs["unknown_key"].format(key=key), key)
            if i + 1 < len(tokens):
                p.tok(i + 1)
                i += 1
            i += 1
    return p


def _run_split(text: str, version: Version) -> _Parser:
    p = _Parser([], version, "split")
    for item in re.split(r"[\s,]+", text):
        kv = [part for part in re.split(r":+", item)]
        if len(kv) < 2:
            if item:
                p.notes.append(f"'{item}' has no ':' and is silently ignored by this release")
            continue
        key, raw = kv[0], kv[1]
        msgs = p.msgs
        if key == "max_split_size_mb" and p.known(key):
            number = _cpp_int(raw, "stoi", key, {"not_a_number": "stoi (could not read '{value}' for {key})"})
            if number <= 20:
                raise _Reject(msgs["max_split_small"], key)
            p.settings[key] = number
        elif key == "roundup_power2_divisions" and p.known(key):
            number = _cpp_int(raw, "stoi", key, {"not_a_number": "stoi (could not read '{value}' for {key})"})
            if not _pow2(number):
                raise _Reject(msgs["roundup_pow2"], key)
            p.settings[key] = number
        elif key == "garbage_collection_threshold" and p.known(key):
            threshold = _cpp_double(raw, key, {"not_a_number": "stod (could not read '{value}' for {key})"})
            if not threshold > 0:
                raise _Reject(msgs["gc_small"], key)
            if not threshold < 1:
                raise _Reject(msgs["gc_big"], key)
            p.settings[key] = threshold
        elif key == "backend" and p.known(key):
            if raw not in ("native", "cudaMallocAsync"):
                raise _Reject(msgs["backend"], key)
            p.settings[key] = raw
        else:
            raise _Reject(msgs["unknown_key"].format(key=key), key)
    return p


def judge(text: str, version: Version) -> Verdict:
    """What PyTorch ``version`` does with allocator string ``text``."""
    era = era_of(version)
    exception = next(e["exception"] for e in table()["eras"] if e["name"] == era)
    try:
        if era == "split":
            parser = _run_split(text, version)
        elif era == "lexer":
            parser = _run_lexer(tokenize(text, era), version)
        else:
            parser = _run_tokenizer(tokenize(text, era), version)
    except _Reject as rejection:
        return Verdict(version, era, False, str(rejection), exception, rejection.key)
    notes = list(parser.notes)
    if parser.settings.get("expandable_segments") is True and parser.settings.get("backend") != "cudaMallocAsync":
        moot = table().get("with_expandable_segments", {})
        notes += [str(moot[k]["note"]) for k in parser.settings if k in moot and moot[k].get("effect") == "moot"]
    if era != "split" and "backend" in parser.settings and parser.settings["backend"] == "cudaMallocAsync":
        native_only = sorted(k for k in parser.settings if k not in ("backend",))
        if native_only:
            notes.append(
                "backend:cudaMallocAsync ignores max_split_size_mb, roundup_power2_divisions, "
                "and garbage_collect_threshold (PyTorch warns); other options given: " + ", ".join(native_only)
            )
    return Verdict(version, era, True, None, None, None, dict(parser.settings), tuple(notes))


def parse(text: str, torch_version: Version | None = None) -> AllocConf:
    """Judge ``text`` under ``torch_version`` or, when unknown, under the probe releases."""
    if torch_version is not None:
        versions: list[Version] = [torch_version]
    else:
        versions = [_v(v) for v in table()["unknown_version_probes"]]
    return AllocConf(text, torch_version, tuple(judge(text, v) for v in versions))


def key_since(key: str) -> Version | None:
    spec = table()["options"].get(key)
    return _v(spec["since"]) if spec else None


def alloc_conf_primary(version: Version | None) -> bool | None:
    """Does this release read PYTORCH_ALLOC_CONF first (None: unknown release)?"""
    if version is None:
        return None
    return version >= _v(table()["env_names"]["primary_from"])


def alloc_conf_ignored_for_cuda(version: Version | None) -> bool | None:
    """Releases where PYTORCH_ALLOC_CONF alone left CUDA expandable segments off (pytorch#183387)."""
    if version is None:
        return None
    span = table()["env_names"]["alloc_conf_ignored_for_cuda"]
    return _v(span["from"]) <= version < _v(span["before"])


def suggest_fix(text: str, verdict: Verdict) -> str:
    """A corrected string for the common mistakes: ``=``, lower-case booleans, spaces."""
    fixed = text.strip().strip("'\"")
    fixed = re.sub(r"\s+", "", fixed)
    fixed = re.sub(r"(?<=[A-Za-z_])=(?=[^,]*)", ":", fixed)
    fixed = re.sub(r":(true|TRUE|1|yes|on)\b", ":True", fixed)
    fixed = re.sub(r":(false|FALSE|0|no|off)\b(?!\.)", ":False", fixed)
    # keep only the options this release knows (drop the offending unknown one)
    if verdict.key and key_since(verdict.key) is None:
        parts = [part for part in fixed.split(",") if not part.startswith(verdict.key)]
        fixed = ",".join(parts)
    if verdict.key and verdict.key in ("max_split_size_mb", "max_non_split_rounding_mb"):
        fixed = re.sub(
            rf"{verdict.key}:[^,]*", f"{verdict.key}:128" if "split_size" in verdict.key else f"{verdict.key}:20", fixed
        )
    if verdict.key == "garbage_collection_threshold":
        fixed = re.sub(r"garbage_collection_threshold:[^,]*", "garbage_collection_threshold:0.8", fixed)
    if verdict.key == "expandable_segments":
        # a value no spelling rule repairs ("maybe", empty, mojibake): suggest the setting's purpose
        fixed = re.sub(r"expandable_segments:(?!(?:True|False)(?:,|$))[^,]*", "expandable_segments:True", fixed)
    return fixed
