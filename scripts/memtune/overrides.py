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
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from memtune.cli import InputError

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
    return Override(op=op, path=tuple(key.split(".")), value=parse_value(value) if sep else None,
                    has_value=bool(sep), text=raw)


def apply_override(cfg: dict, ov: Override) -> None:
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


def apply_overrides(cfg: Mapping[str, Any] | None, overrides: Iterable[str]) -> dict:
    """A deep copy of ``cfg`` with every override applied in order."""
    out = copy.deepcopy(dict(cfg or {}))
    for text in overrides:
        apply_override(out, parse_override(text))
    return out


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
        return any(want[:i] + want[i + 1:] == words for i in range(len(want)))
    if len(words) != len(want):
        return False
    differ = [(a, b) for a, b in zip(words, want) if a != b]
    return 0 < len(differ) <= 2 and all(difflib.SequenceMatcher(None, a, b).ratio() >= 0.75 for a, b in differ)
