"""Which files of an installed copy are a working checkout's leftovers (pure path logic)."""

from __future__ import annotations

from pathlib import Path

from memtune.release import checkout_leftovers as lo

REPO_ROOT = Path(__file__).resolve().parent.parent

SKILL_FILES = ["SKILL.md", "scripts/diagnose.py", "scripts/memtune/cli.py", "references/memory-model.md"]


def test_typical_checkout_leftovers_are_grouped_with_counts():
    venv = [f".venv/lib/python3.11/site-packages/pkg/m{i}.py" for i in range(40)] + [".venv/pyvenv.cfg"]
    paths = [
        *SKILL_FILES,
        *venv,
        ".hypothesis/examples/ab/cd",
        "nemo_mbridge_perf_memory_tuning.egg-info/PKG-INFO",
        "nemo_mbridge_perf_memory_tuning.egg-info/SOURCES.txt",
        ".pytest_cache/v/cache/lastfailed",
        "scripts/.mypy_cache/3.11/x.json",
        ".ruff_cache/0.17.6/123",
        "build/lib/memtune/cli.py",
        "benchmarks/out/diag.log",
        "evals/results/run.jsonl.tmp",
        ".coverage",
    ]
    split = lo.split_leftovers(paths, signed=SKILL_FILES)
    groups = {g.path: (g.kind, g.files) for g in split.groups}
    assert groups == {
        ".venv": ("virtualenv", 41),
        ".hypothesis": ("Hypothesis example database", 1),
        "nemo_mbridge_perf_memory_tuning.egg-info": ("package build metadata", 2),
        ".pytest_cache": ("pytest cache", 1),
        "scripts/.mypy_cache": ("mypy cache", 1),
        ".ruff_cache": ("ruff cache", 1),
        "build": ("build output", 1),
        "benchmarks/out": ("benchmark output", 1),
        "evals/results/run.jsonl.tmp": ("interrupted benchmark result", 1),
        ".coverage": ("coverage data", 1),
    }
    assert split.groups[0].path == ".venv"  # largest first
    assert list(split.other) == sorted(SKILL_FILES)
    assert len(split.leftover_files) == len(paths) - len(SKILL_FILES)


def test_a_virtualenv_is_recognised_by_its_marker_whatever_its_name():
    split = lo.split_leftovers(["SKILL.md", "myenv/pyvenv.cfg", "myenv/bin/python", "myenv/lib/x.py"])
    assert [(g.path, g.kind, g.files) for g in split.groups] == [("myenv", "virtualenv", 3)]
    assert split.other == ("SKILL.md",)


def test_genuine_extra_files_are_not_leftovers():
    extras = ["scripts/evil.py", "scripts/memtune/build/x.py", "notes.txt", "tools/venv/x.py", "evals/x.tmp"]
    split = lo.split_leftovers([*SKILL_FILES, *extras], signed=SKILL_FILES)
    assert not split and split.groups == ()
    assert set(split.other) == {*SKILL_FILES, *extras}


def test_a_folder_holding_signed_files_is_content_not_a_leftover():
    """If the package itself ships `build/`, extra files there must read as tampering."""
    signed = [*SKILL_FILES, "build/recipe.py"]
    split = lo.split_leftovers([*signed, "build/planted.py", ".hypothesis/x"], signed=signed)
    assert [g.path for g in split.groups] == [".hypothesis"]
    assert "build/planted.py" in split.other


def test_a_marker_at_the_package_root_does_not_make_everything_a_leftover():
    split = lo.split_leftovers([*SKILL_FILES, "pyvenv.cfg"], signed=SKILL_FILES)
    assert not split and "pyvenv.cfg" in split.other


def test_message_is_one_short_line_even_for_thousands_of_files():
    paths = [f".venv/lib/site-packages/p{i // 50}/m{i}.py" for i in range(9412)]
    paths += [f"pkg{i}.egg-info/PKG-INFO" for i in range(30)] + [".hypothesis/examples/a"]
    split = lo.split_leftovers([*SKILL_FILES, *paths], signed=SKILL_FILES)
    text = lo.message(split.groups)
    assert "\n" not in text and len(text) < 600
    assert text.startswith("installed from a working checkout: .venv (9,412 files)")
    assert "… and 27 more" in text and "reinstall" in text and "git -C CHECKOUT archive HEAD" in text
    assert "9,443 unsigned files" in text


def test_belongs_to_matches_whole_path_components_only():
    groups = lo.split_leftovers([".venv/pyvenv.cfg", ".venv/x.pyc"]).groups
    assert lo.belongs_to(".venv/lib/a.pyc", groups)
    assert not lo.belongs_to(".venvx/a.pyc", groups) and not lo.belongs_to("scripts/a.pyc", groups)


def test_every_gitignore_pattern_of_the_repository_is_a_known_leftover():
    """The repository's .gitignore names what a working checkout accumulates; each of those
    must be recognised by the (signed) list in code, which never reads the copy's .gitignore."""
    samples = {
        ".venv/": ".venv/bin/python",
        "__pycache__/": None,  # the skills CLI never copies __pycache__
        "*.pyc": None,  # bytecode has its own, stricter failure
        "*.egg-info/": "x.egg-info/PKG-INFO",
        "build/": "build/lib/x.py",
        ".pytest_cache/": ".pytest_cache/v/x",
        ".hypothesis/": ".hypothesis/examples/x",
        ".mypy_cache/": ".mypy_cache/3.10/x.json",
        ".ruff_cache/": ".ruff_cache/0.17.6/x",
        "/evals/results/*.tmp": "evals/results/a.tmp",
        "/benchmarks/out/": "benchmarks/out/a.log",
    }
    patterns = [
        line.strip()
        for line in (REPO_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    unknown = [p for p in patterns if p not in samples]
    assert not unknown, (
        f"new .gitignore pattern(s) {unknown}: add them to memtune/release/checkout_leftovers.py and here"
    )
    for pattern, sample in samples.items():
        if sample is not None:
            assert lo.split_leftovers([sample]).leftover_files == (sample,), pattern
