"""textfile: user files read as text, and YAML syntax errors reported in one line."""

from __future__ import annotations

import pytest
import yaml

from memtune.errors import InputError
from memtune.files.textfile import read_text, yaml_syntax_error


def test_yaml_syntax_error_names_file_line_and_problem(tmp_path) -> None:
    path = tmp_path / "bridge.yaml"
    text = "model:\n  tensor_model_parallel_size: 4\n  recompute_modules: [core_attn\n"
    with pytest.raises(yaml.YAMLError) as caught:
        yaml.safe_load(text)
    message = str(yaml_syntax_error(path, caught.value))
    assert message.startswith(f"{path}:4: not valid YAML (")
    assert "\n" not in message and "<unicode string>" not in message
    assert message.endswith("; fix the syntax")


def test_yaml_syntax_error_without_a_position_still_names_the_file(tmp_path) -> None:
    message = str(yaml_syntax_error(tmp_path / "x.yaml", yaml.YAMLError("something broke")))
    assert message == f"{tmp_path / 'x.yaml'}: not valid YAML (something broke); fix the syntax"


def test_read_text_refuses_a_binary_file(tmp_path) -> None:
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(InputError, match="binary file"):
        read_text(binary, "a launch script")
