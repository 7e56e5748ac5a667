"""Hydra-style overrides on a nested dict, as Megatron Bridge's launch scripts pass them.

``a.b=v`` sets an existing (or new) key, ``+a.b=v`` adds a key that must not exist yet,
``++a.b=v`` sets whether or not it exists, ``~a.b`` (or ``~a.b=v`` when the value matches)
deletes it. Values are YAML scalars or flow lists/maps (``4``, ``true``, ``null``,
``[core_attn,mlp]``, ``"4"``), exactly as Hydra reads them. Every malformed override is
an InputError naming it. The functions are pure: the input dict is never modified.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memtune.errors import InputError

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_0-9][A-Za-z0-9_\-]*)*$")


@dataclass(frozen=True)
class Override:
    op: str  # set | add | force | delete
    path: tuple[str, ...]
    value: Any = None
    has_value: bool = True
    text: str = ""


def parse_value(text: str) -> Any:
    """A YAML scalar / flow collection; plain text when it is not valid YAML."""
    stripped = text.strip()
    if stripped == "":
        return ""
    try:
        import yaml  # lazy: --help must work without PyYAML

        return yaml.safe_load(stripped)
    except Exception:  # noqa: BLE001 - Hydra keeps unparsable values as strings
        return stripped


def parse_override(text: str) -> Override:
    raw = text.strip()
    op = "set"
    body = raw
    if body.startswith("++"):
        op, body = "force", body[2:]
    elif body.startswith("+"):
        op, body = "add", body[1:]
    elif body.startswith("~"):
        op, body = "delete", body[1:]
    key, sep, value = body.partition("=")
    key = key.strip()
    if not key or not _KEY.match(key):
        raise InputError(f"override {raw!r}: expected key.path=value (e.g. model.tensor_model_parallel_size=4)")
    if op != "delete" and not sep:
        raise InputError(f"override {raw!r}: missing '=value' (use ~{key} to delete a key)")
    return Override(
        op=op, path=tuple(key.split(".")), value=parse_value(value) if sep else None, has_value=bool(sep), text=raw
    )


def apply_override(cfg: dict[str, Any], ov: Override) -> None:
    """Apply one parsed override in place (callers pass a copy)."""
    node: Any = cfg
    for part in ov.path[:-1]:
        if not isinstance(node, dict):
            raise InputError(f"override {ov.text!r}: {part!r} is inside a non-mapping value")
        if part not in node or node[part] is None:
            if ov.op == "delete":
                raise InputError(f"override {ov.text!r}: key {'.'.join(ov.path)} does not exist")
            node[part] = {}
        node = node[part]
    if not isinstance(node, dict):
        raise InputError(f"override {ov.text!r}: parent of {ov.path[-1]!r} is not a mapping")
    leaf = ov.path[-1]
    if ov.op == "delete":
        if leaf not in node:
            raise InputError(f"override {ov.text!r}: key {'.'.join(ov.path)} does not exist")
        if ov.has_value and node[leaf] != ov.value:
            raise InputError(f"override {ov.text!r}: current value {node[leaf]!r} does not match")
        del node[leaf]
    elif ov.op == "add":
        if leaf in node:
            raise InputError(f"override {ov.text!r}: key {'.'.join(ov.path)} already exists; use ++ to overwrite")
        node[leaf] = ov.value
    else:
        node[leaf] = ov.value


def apply_overrides(
    cfg: Mapping[str, Any] | None, overrides: Iterable[str], known: Iterable[str] | None = None
) -> dict[str, Any]:
    """A deep copy of ``cfg`` with every override applied in order.

    With ``known`` (dotted keys the caller reads), a plain ``a.b=v`` whose key is in
    neither the config nor ``known`` but misspells one of them is refused (see
    :func:`refuse_misspelt`); ``+a.b=v`` and ``++a.b=v`` say the key is meant as written."""
    out = copy.deepcopy(dict(cfg or {}))
    for text in overrides:
        ov = parse_override(text)
        if known is not None and ov.op == "set" and not _has_path(out, ov.path):
            refuse_misspelt(ov.text, ".".join(ov.path), {*known, *_dotted_keys(out)})
        apply_override(out, ov)
    return out


def _has_path(cfg: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = cfg
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _dotted_keys(cfg: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        keys.add(dotted)
        if isinstance(value, Mapping):
            keys |= _dotted_keys(value, dotted + ".")
    return keys


def refuse_misspelt(text: str, key: str, known: Iterable[str]) -> None:
    """Raise InputError when ``key`` is not in ``known`` but misspells a key there.

    ``model.tensor_parallel_size=8`` would be stored and never read, so the run would be
    judged unchanged. Hydra refuses a plain override of a key the config lacks; the helpers
    know only the keys they read, so they refuse just the typos of those (:func:`typo_of`)
    and let other new keys through. One code path for every helper that takes overrides."""
    names = set(known)
    if key in names:
        return
    section, _, leaf = key.rpartition(".")
    for path in sorted(names):
        known_section, _, known_leaf = path.rpartition(".")
        if known_section == section and typo_of(leaf, known_leaf):
            raise InputError(
                f"override {text or key!r}: {key} is not a setting memtune reads; did you mean {path}? "
                f"(write ++{key}=... to keep it as it is)"
            )


def is_override(token: str) -> bool:
    """Does a command-line token look like a Hydra override (not a flag, has key=)?"""
    if token.startswith("-") and not token.startswith("~"):
        return False
    body = token.lstrip("+~")
    key = body.partition("=")[0]
    return bool(key) and bool(_KEY.match(key)) and ("=" in body or token.startswith("~"))


def typo_of(name: str, known: str) -> bool:
    """Is the key name ``name`` a typo of ``known``: a dropped word (tensor_parallel_size for
    tensor_model_parallel_size) or up to two misspelt words (paralel, sise)? A name with an
    extra word (encoder_pipeline_model_parallel_size, pipeline_model_parallel_split_rank) is
    another real setting, not a typo. Used to refuse plain overrides that would be ignored."""
    import difflib

    words, want = name.split("_"), known.split("_")
    if len(words) == len(want) - 1:
        return any(want[:i] + want[i + 1 :] == words for i in range(len(want)))
    if len(words) != len(want):
        return False
    differ = [(a, b) for a, b in zip(words, want, strict=True) if a != b]
    return 0 < len(differ) <= 2 and all(difflib.SequenceMatcher(None, a, b).ratio() >= 0.75 for a, b in differ)
