"""Which PyTorch printed an OOM message, and which allocator settings that release takes.

Why: the standard fragmentation fix, ``expandable_segments:True``, only exists since 2.1;
1.10-2.0 raise "Unrecognized CachingAllocator option" on it and older releases do not read
the variable at all.  Users rarely say their version, but the message wording dates it
(data/oom_evidence.yaml ``torch_formats``): each marker found narrows the range of
releases that could have printed it.  ``--torch-version`` overrides the inference, as in
check_env.py; the version facts themselves come from data/alloc_conf.yaml via
memtune.readers.alloc_conf, so the two helpers never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from memtune.diagnose.evidence import Evidence
from memtune.readers import alloc_conf
from memtune.readers.alloc_conf import Version, parse_version, version_str

ACCEPTED, REJECTED, IGNORED, PLATFORM, UNKNOWN = "accepted", "rejected", "ignored", "ignored-on-platform", "unknown"


@dataclass(frozen=True)
class TorchRange:
    """Releases that fit the evidence: ``[since, before)``, or one exact version."""

    since: Version | None = None
    before: Version | None = None
    exact: Version | None = None
    evidence: tuple[str, ...] = ()
    origin: str | None = None  # where an exact version came from; None: --torch-version

    @property
    def source(self) -> str:
        if self.exact is not None:
            return self.origin or "--torch-version"
        return "message format" if self.evidence else "unknown"

    def describe(self) -> str:
        if self.exact is not None:
            return version_str(self.exact)
        if self.since and self.before:
            return f"{version_str(self.since)} to before {version_str(self.before)}"
        if self.since:
            return f"{version_str(self.since)} or newer"
        if self.before:
            return f"before {version_str(self.before)}"
        return "unknown"

    def at_least(self, v: Version) -> bool | None:
        """True/False when the evidence decides ``version >= v``, None when it cannot."""
        if self.exact is not None:
            return self.exact >= v
        if self.since is not None and self.since >= v:
            return True
        if self.before is not None and self.before <= v:
            return False
        return None


def infer(text: str, evidence: Evidence) -> TorchRange:
    """Intersect the release ranges of every format marker in ``text``."""
    since: Version | None = None
    before: Version | None = None
    notes: list[str] = []
    for fm in evidence.formats:
        if not fm.marker.search(text):
            continue
        lo = parse_version(fm.since) if fm.since else None
        hi = parse_version(fm.before) if fm.before else None
        if lo is not None and (since is None or lo > since):
            since = lo
        if hi is not None and (before is None or hi < before):
            before = hi
        span = f"[{fm.since or '...'}, {fm.before or '...'})"
        notes.append(f"{fm.label} {span}: {fm.evidence}")
    if since is not None and before is not None and since >= before:
        notes.append("markers disagree (edited or mixed text); release range left open")
        since = before = None
    return TorchRange(since=since, before=before, evidence=tuple(notes))


def exact(version_text: str) -> TorchRange:
    """The user's ``--torch-version`` (an InputError names a malformed value)."""
    v = parse_version(version_text)
    assert v is not None
    return TorchRange(exact=v, evidence=(f"--torch-version {version_str(v)}",))


STATED = "stated in the input"


def stated_version(facts: dict[str, int] | None) -> Version | None:
    """The release a pasted environment report or package listing named (run facts
    ``torch_major`` / ``torch_minor`` / ``torch_patch``, data/oom_patterns.yaml ``context``)."""
    if not facts or "torch_major" not in facts or "torch_minor" not in facts:
        return None
    return (facts["torch_major"], facts["torch_minor"], facts.get("torch_patch", 0))


def with_stated(inferred: TorchRange, stated: Version | None) -> TorchRange:
    """The stated release when the message wording allows it, else the wording's range.

    Why: users paste ``collect_env`` or ``pip list`` next to the error far more often than
    they say their version, and an exact release answers what the wording can only bound
    (a title with no hint, the Chinese heading of an issue).  When the two disagree the
    listing is likely from another machine or another run, so the message itself wins.
    """
    if stated is None:
        return inferred
    said = f"{STATED}: torch {version_str(stated)}"
    if (inferred.since is not None and stated < inferred.since) or (
        inferred.before is not None and stated >= inferred.before
    ):
        return replace(
            inferred, evidence=inferred.evidence + (f"{said} contradicts the message wording, which is kept",)
        )
    return TorchRange(exact=stated, evidence=inferred.evidence + (said,), origin=STATED)


def expandable_status(rng: TorchRange, platform_unsupported: bool = False) -> str:
    """accepted / rejected (raises) / ignored (variable not read) / ignored-on-platform / unknown."""
    if platform_unsupported:
        return PLATFORM
    es_since = alloc_conf.key_since("expandable_segments")
    conf_since = alloc_conf.key_since("max_split_size_mb")  # first release reading the variable
    assert es_since is not None and conf_since is not None
    if rng.at_least(es_since):
        return ACCEPTED
    if rng.at_least(es_since) is False:
        if rng.at_least(conf_since):
            return REJECTED
        if rng.at_least(conf_since) is False:
            return IGNORED
        return REJECTED  # either way it does nothing useful; rejecting is the louder case
    return UNKNOWN


def max_split_available(rng: TorchRange) -> bool | None:
    since = alloc_conf.key_since("max_split_size_mb")
    assert since is not None
    return rng.at_least(since)


def alloc_conf_rename_applies(rng: TorchRange) -> bool | None:
    """Does this release read PYTORCH_ALLOC_CONF first (2.9+: set both names)?"""
    primary = parse_version(alloc_conf.table()["env_names"]["primary_from"])
    assert primary is not None
    return rng.at_least(primary)


def split_combo_safe_from() -> str:
    """First release where expandable segments + max_split_size_mb no longer assert."""
    return str(alloc_conf.table()["es_with_split_or_gc_fixed_in"])


def as_json(rng: TorchRange, status: str) -> dict[str, Any]:
    return {
        "version": version_str(rng.exact) if rng.exact else None,
        "since": version_str(rng.since) if rng.since else None,
        "before": version_str(rng.before) if rng.before else None,
        "range": rng.describe(),
        "source": rng.source,
        "evidence": list(rng.evidence),
        "expandable_segments": status,
        "max_split_size_mb": {True: "accepted", False: "not read", None: "unknown"}[max_split_available(rng)],
    }
