"""Read one of the package's own YAML data files (presets aside: rules, patterns, costs).

These files ship with the skill and are part of its signed content, so a parse error is a
packaging bug, not user input: no InputError conversion here. PyYAML is imported lazily
so that every helper's --help still works without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_data_yaml(path: Path) -> Any:
    """The parsed document of a shipped YAML file (``yaml.safe_load``)."""
    import yaml  # lazy: --help must work without third-party packages

    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)
