"""Model presets: public architecture facts kept as YAML data files.

Each ``data/presets/<name>.yaml`` holds ``name``, ``source`` (where the numbers come from)
and ``model`` (ModelSpec field names). Adding a model is adding a file, not code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memtune.errors import InputError
from memtune.files.paths import DATA_DIR
from memtune.spec.model_spec import ModelSpec, model_from_mapping

PRESETS_DIR: Path = DATA_DIR / "presets"


def preset_names() -> list[str]:
    """Known preset names, sorted."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def preset_source(name: str) -> str:
    return str(_read(name).get("source", ""))


def _read(name: str) -> dict[str, Any]:
    key = name.strip().lower()
    path = PRESETS_DIR / f"{key}.yaml"
    if not path.is_file():
        raise InputError(f"unknown preset {name!r}; known presets: {', '.join(preset_names())}")
    import yaml  # lazy: --help must work without PyYAML

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise InputError(f"{path}: expected a mapping with a 'model' section")
    return data


def load_preset(name: str) -> ModelSpec:
    """The ModelSpec of a named preset (InputError listing the known ones if unknown)."""
    data = _read(name)
    try:
        return model_from_mapping(data["model"], name=str(data.get("name", name)))
    except (ValueError, TypeError) as exc:
        raise InputError(f"preset {name}: {exc}") from None
