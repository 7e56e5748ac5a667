"""memtune.release.shipped_files: the signed set is what `npx skills add` ships."""

from __future__ import annotations

import os

import pytest

from memtune.errors import InputError
from memtune.release import shipped_files
from signing_pki import git_commit_all


@pytest.fixture
def repo(tmp_path):
    """A small git repo with a venv and caches lying around, as a developer's checkout has."""
    root = tmp_path / "pkg"
    for rel, text in {
        "SKILL.md": "---\nname: pkg\n---\n",
        ".gitignore": ".venv/\n__pycache__/\n",
        ".ci/run": "#!/bin/sh\n",
        "scripts/tool.py": "print(1)\n",
        "scripts/lib/mod.py": "X = 1\n",
        "docs/metadata.json": "{}\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git_commit_all(root)
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "site.py").write_text("junk\n")
    (root / "scripts" / "__pycache__").mkdir()
    (root / "scripts" / "__pycache__" / "tool.cpython-311.pyc").write_bytes(b"\0")
    return root


def test_git_work_tree_ships_tracked_files_only(repo):
    shipped = shipped_files.shipped_set(repo)
    assert shipped.mode == shipped_files.MODE_GIT
    assert shipped.files == (".ci/run", "SKILL.md", "scripts/lib/mod.py", "scripts/tool.py")
    assert shipped.unsignable == (".gitignore",)  # ships, but model_signing skips it
    assert shipped.untracked == ()


def test_untracked_and_deleted_files_are_reported(repo):
    (repo / "notes.txt").write_text("draft\n")
    (repo / "scripts" / "tool.py").unlink()
    shipped = shipped_files.shipped_set(repo)
    assert shipped.untracked == ("notes.txt",)
    assert shipped.missing == ("scripts/tool.py",)
    assert "scripts/tool.py" not in shipped.files


def test_plain_folder_ships_everything_but_what_the_skills_cli_drops(repo):
    shipped = shipped_files.shipped_set(repo, use_git=False)
    assert shipped.mode == shipped_files.MODE_DIRECTORY
    assert ".venv/lib/site.py" in shipped.files  # a local `npx skills add DIR` copies it
    assert not any("__pycache__" in f or f.endswith("metadata.json") or f.startswith(".git/") for f in shipped.files)


def test_signature_file_is_never_in_the_set(repo):
    (repo / "skill.oms.sig").write_text("{}")
    assert "skill.oms.sig" not in shipped_files.shipped_set(repo, use_git=False).files


def test_symlink_inside_the_tree_is_refused(repo):
    os.symlink("SKILL.md", repo / "link.md")
    with pytest.raises(InputError, match="symlink"):
        shipped_files.shipped_set(repo, use_git=False)


def test_dirty_paths_ignore_only_the_signature(repo):
    assert shipped_files.git_dirty_paths(repo) == []
    (repo / "skill.oms.sig").write_text("{}")
    assert shipped_files.git_dirty_paths(repo) == []
    (repo / "SKILL.md").write_text("changed\n")
    (repo / "new.txt").write_text("x\n")
    assert sorted(shipped_files.git_dirty_paths(repo)) == ["SKILL.md", "new.txt"]


@pytest.mark.parametrize(
    "rel, excluded",
    [
        ("a/__pycache__/x.pyc", True),
        ("__pypackages__/x", True),
        ("metadata.json", True),
        ("deep/metadata.json", True),
        (".git", True),
        ("scripts/x.py", False),
        (".ci/run", False),
        ("metadata.json.bak", False),
    ],
)
def test_is_excluded_follows_the_skills_cli(rel, excluded):
    assert shipped_files.is_excluded(rel) is excluded


def test_bytecode_is_found_in_caches_and_as_sourceless_files(tmp_path):
    (tmp_path / "scripts" / "__pycache__").mkdir(parents=True)
    (tmp_path / "scripts" / "__pycache__" / "cli.cpython-312.pyc").write_bytes(b"\0")
    (tmp_path / "scripts" / "argparse.pyc").write_bytes(b"\0")
    (tmp_path / "old.pyo").write_bytes(b"\0")
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "x.pyc").write_bytes(b"\0")
    (tmp_path / "scripts" / "tool.py").write_text("")
    assert sorted(shipped_files.bytecode_files(tmp_path)) == [
        ".venv/lib/x.pyc",
        "old.pyo",
        "scripts/__pycache__/cli.cpython-312.pyc",
        "scripts/argparse.pyc",
    ]
    assert sorted(shipped_files.bytecode_files(tmp_path, in_caches=False, in_venvs=False)) == [
        "old.pyo",
        "scripts/argparse.pyc",
    ]
    assert ".venv/lib/x.pyc" not in shipped_files.bytecode_files(tmp_path, in_venvs=False)
    assert shipped_files.is_bytecode("a/__pycache__/notes.txt") and not shipped_files.is_bytecode("a/b.py")


def test_export_copies_exactly_the_shipped_files(repo, tmp_path):
    shipped = shipped_files.shipped_set(repo)
    dest = shipped_files.export(shipped, tmp_path / "out" / "pkg")
    copied = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert copied == sorted(shipped.files + shipped.unsignable)
    assert (dest / "scripts" / "tool.py").read_text() == "print(1)\n"
