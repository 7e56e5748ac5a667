"""Read one of the package's own YAML data files (presets aside: rules, patterns, costs).

These files ship with the skill and are part of its signed content, so a parse error is a
packaging bug, not user input: no InputError conversion here. PyYAML is imported lazily
so that every helper's --help still works without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_data_yaml(path: Path) -> Any:
    """The parsed document of a shipped YAML file (``yaml.safe_load`` semantics).

    libyaml's CSafeLoader when PyYAML was built with it: the same safe constructors, parsed
    in C, which takes diagnose.py's start-up from ~0.2 s of YAML parsing to a few ms (that
    start-up is part of every run, and of its speed bar against grep).
    """
    import yaml  # lazy: --help must work without third-party packages

    with open(path, encoding="utf-8") as handle:
        if getattr(yaml, "__with_libyaml__", False):
            return yaml.load(handle, Loader=yaml.CSafeLoader)
        return yaml.safe_load(handle)


def load_data_mapping(path: Path) -> dict[str, Any]:
    """A shipped YAML file whose top level must be a mapping (every rule and cost table is).

    Callers index into the result by key; a file emptied or turned into a list by a bad edit
    fails here with its name instead of as a KeyError/AttributeError somewhere downstream.
    """
    doc = load_data_yaml(path)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a YAML mapping at the top level, found {type(doc).__name__}")
    return doc
