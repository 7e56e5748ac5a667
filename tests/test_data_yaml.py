"""The shipped YAML data files load through the one loader every module uses."""

from __future__ import annotations

import pytest

from memtune.files.data_yaml import load_data_yaml
from memtune.files.paths import DATA_DIR

SHIPPED = sorted(p for p in DATA_DIR.rglob("*.yaml") if "presets" not in p.parts and "examples" not in p.parts)


def test_there_are_data_files_to_load() -> None:
    names = {p.name for p in SHIPPED}
    assert {"alloc_conf.yaml", "check_rules.yaml", "oom_patterns.yaml", "throughput_costs.yaml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(DATA_DIR)))
def test_each_data_file_is_a_mapping(path) -> None:
    assert isinstance(load_data_yaml(path), dict)


def test_a_broken_data_file_raises_the_yaml_error(tmp_path) -> None:
    import yaml

    bad = tmp_path / "bad.yaml"
    bad.write_text("key: [unclosed\n", encoding="utf-8")
    with pytest.raises(yaml.YAMLError):
        load_data_yaml(bad)
