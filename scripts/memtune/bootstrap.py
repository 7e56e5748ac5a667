"""Start a helper only when its runtime dependencies import.

An installed skill copy runs with whatever ``python3`` the agent finds. When a
dependency is missing, the user should read which package to install and how, not an
ImportError traceback from deep inside a module.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import itertools
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import CodeType

# import name -> PyPI distribution name
PIP_NAMES: dict[str, str] = {
    "click": "click",
    "yaml": "pyyaml",
    "markdown_it": "markdown-it-py",
    "jsonschema": "jsonschema",
    "model_signing": "model-signing",
    "OpenSSL": "pyopenssl",
    "llama_cpp": "llama-cpp-python",
}

MIN_PYTHON = (3, 10)

#: Every helper parses its command line with click, --help included, so click is checked on
#: every start; 8.1 is the oldest release whose API the helpers use (pyproject.toml agrees).
MIN_CLICK = (8, 1)


def bytecode_outside(skill_root: Path, prefix: str | None = None) -> bool:
    """Is bytecode kept away from ``skill_root``? (``sys.pycache_prefix`` by default.)

    Each entry point sets the prefix before its first package import, because a planted
    unchecked ``.pyc`` in a ``__pycache__`` of the signed tree would otherwise run in place
    of the verified source. This is the guard that a new entry point did not forget it.
    """
    prefix = sys.pycache_prefix if prefix is None else prefix
    if not prefix or not os.path.isabs(prefix):
        return False
    return not Path(prefix).resolve().is_relative_to(skill_root.resolve())


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The import names among ``modules`` that this interpreter cannot find."""
    absent = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            absent.append(name)
    return absent


#: Version requirements written into the install command (quoted for the shell): click's
#: oldest usable release, and the model-signing release the signature format was made with.
PIP_REQUIREMENTS: dict[str, str] = {
    "click": "'click>=8.1'",
    "model_signing": "model-signing==1.1.1",
}


def install_hint(modules: Iterable[str]) -> str:
    packages = " ".join(PIP_REQUIREMENTS.get(m) or PIP_NAMES.get(m, m) for m in modules)
    return f"{sys.executable} -m pip install {packages}"


def version_tuple(text: str) -> tuple[int, ...]:
    """'8.1.7' -> (8, 1, 7); the leading numbers only ('8.2.0rc1' -> (8, 2, 0))."""
    numbers = []
    for part in text.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(numbers)


def installed_version(module: str) -> str | None:
    """The version in the metadata of the distribution that provides importable ``module``.

    Read from the ``<name>-<version>.dist-info/METADATA`` next to the package that
    ``import module`` would load - plain file reads, because ``importlib.metadata`` costs
    more at start-up (email, zipfile, inspect...) than the whole of ``--help`` may take.
    None when there is no such metadata (a vendored copy on sys.path).
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    site = Path(spec.origin).parent.parent if spec.submodule_search_locations else Path(spec.origin).parent
    prefix = module.lower().replace("-", "_") + "-"
    try:
        names = sorted(n for n in os.listdir(site) if n.lower().startswith(prefix) and n.endswith(".dist-info"))
    except OSError:
        return None
    for name in names:
        try:
            with open(site / name / "METADATA", encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if not line.strip():
                        break  # end of the header block
        except OSError:
            continue
        return name[len(prefix) : -len(".dist-info")]
    return None


def too_old_click() -> str | None:
    """The installed click's version when it is older than :data:`MIN_CLICK`, else None.

    Read from the distribution's metadata, so that nothing of click is imported (or
    compiled) before the check; a click without metadata (vendored on sys.path) is trusted.
    """
    found = installed_version("click")
    if found is None:
        return None
    return found if version_tuple(found) < MIN_CLICK else None


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compile the module from its ``.py`` every time; never read or write its bytecode."""

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


#: The trees :func:`load_sources_only` already covers in this process.
_SOURCE_ONLY_ROOTS: set[str] = set()


def _inside(path: str, root: str) -> bool:
    real = os.path.realpath(path or os.getcwd())
    return real == root or real.startswith(root + os.sep)


def load_sources_only(root: Path) -> None:
    """From here on, every module under ``root`` is compiled from its source; nothing else changes.

    The entry points start with ``sys.pycache_prefix`` pointing nowhere (os.devnull), so that
    no bytecode of the signed tree is read while this module itself loads. That prefix holds
    for *every* module, though: the standard library, click and PyYAML were recompiled on each
    start too, which made ``--help`` six times slower than ``import click``. So, once this
    runs, the modules of the skill are found by a finder that knows only ``.py`` files and a
    loader that always compiles them (a planted ``__pycache__/*.pyc``, a sourceless ``.pyc``
    or an extension module inside the tree is never loaded), and the prefix is dropped, so
    the other libraries use the bytecode their installer compiled. ``sys.dont_write_bytecode``
    stays set: nothing is written anywhere.
    """
    top = os.path.realpath(root)
    if top not in _SOURCE_ONLY_ROOTS:  # once per process (tests run several helpers in one)
        _SOURCE_ONLY_ROOTS.add(top)

        def hook(path: str) -> importlib.machinery.FileFinder:
            if not _inside(path, top) or not os.path.isdir(path or "."):
                raise ImportError("not a folder of the skill")  # the next path hook takes it
            return importlib.machinery.FileFinder(path, (SourceOnlyLoader, [".py"]))

        sys.path_hooks.insert(0, hook)
    for cached in [p for p in sys.path_importer_cache if isinstance(p, str) and _inside(p, top)]:
        del sys.path_importer_cache[cached]  # the finders made while bootstrapping: made again by the hook
    sys.pycache_prefix = None


def launch(module: str, prog: str, requires: Iterable[str] = ()) -> None:
    """Check the interpreter and dependencies, then run ``module.main`` via cli.run."""
    if sys.version_info < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        sys.stderr.write(f"{prog}: error: needs Python >= {need}, this is {sys.version.split()[0]}\n")
        raise SystemExit(2)
    # --help must teach with click alone: command modules import their other third-party
    # libraries only after argument parsing, so help needs none of them.
    # click parses every command line, --help included, so it is always required.
    asks_help = any(arg in ("-h", "--help") for arg in sys.argv[1:])
    absent = missing_modules(["click"] if asks_help else ["click", *requires])
    if absent:
        names = ", ".join(f"{PIP_NAMES.get(m, m)} (import {m})" for m in absent)
        sys.stderr.write(f"{prog}: error: missing Python package(s): {names}; install with: {install_hint(absent)}\n")
        raise SystemExit(2)
    old = too_old_click()
    if old is not None:
        need = ".".join(map(str, MIN_CLICK))
        sys.stderr.write(
            f"{prog}: error: click {old} is too old, the helpers need click >= {need}; install with: "
            f"{sys.executable} -m pip install 'click>={need}'\n"
        )
        raise SystemExit(2)
    skill_root = Path(__file__).resolve().parent.parent.parent
    if not bytecode_outside(skill_root):
        sys.stderr.write(
            f"{prog}: error: the entry point must set sys.pycache_prefix outside {skill_root} "
            "before importing memtune (bytecode inside the signed tree could be planted)\n"
        )
        raise SystemExit(2)
    # Only the skill's own code (scripts/: the entry points and memtune) is compiled from source:
    # a virtual environment made inside the checkout (.venv/, as the README's set-up does)
    # holds third-party extension modules, which a source-only finder must never shadow.
    load_sources_only(skill_root / "scripts")
    from memtune import cli

    entry = importlib.import_module(module)
    cli.run(entry.main, prog)
