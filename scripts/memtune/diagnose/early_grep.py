"""Start the GNU grep prefilter of a big log before the rest of diagnose.py has loaded.

Why: on a large log diagnose.py's time is GNU grep's pass over the file plus the
interpreter's start-up (the entry point compiles every module from source, never from a
bytecode cache, so click, PyYAML and the pipeline take a sizeable fraction of a second
before any byte of the log is read).  Started here, from the entry point, grep reads the
file on another core while that start-up runs, so the start-up no longer adds to the wall
time.

Nothing here decides anything: :func:`take` hands the running grep over only if its
command is exactly the one memtune.diagnose.grep_prefilter would start now (same grep,
same pattern built from the pattern data, same file); otherwise the early process is
killed and the normal path starts its own.  The pattern comes from
data/diagnose_grep_pattern.txt, generated from the YAML pattern data (``python3
scripts/memtune/diagnose/early_grep.py --write``; tests/test_early_grep.py fails when it
is stale), because parsing the YAML here would need PyYAML, which is part of the start-up
this module exists to hide.  Only the stdlib is imported, and only modules the
interpreter has already loaded or that are cheap (os, subprocess).
"""

from __future__ import annotations

import atexit
import os
import subprocess
from pathlib import Path

# Below this size the pure-Python pass is as fast as starting a process (grep_prefilter uses it too).
GREP_MIN_BYTES = 16 << 20
ENV_SWITCH = "MEMTUNE_PREFILTER"
PATTERN_FILE = Path(__file__).resolve().parent.parent / "data" / "diagnose_grep_pattern.txt"
# Options of diagnose.py that take a value / take none; any other option means "not a plain
# log run" (--symptom, --help, a typo): then nothing is started early.
_VALUE_OPTIONS = ("--torch-version", "--limit")
_FLAG_OPTIONS = ("--json",)
_NOT_PLAIN = (b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff")  # gzip, UTF-16: read by Python, not grep

_started: dict[str, tuple[list[str], tuple[int, int, int], subprocess.Popen[bytes]]] = {}


def grep_command(grep: str, pattern: str, path: str) -> list[str]:
    """The prefilter's command line (one place, so the early and the normal start agree)."""
    return [grep, "-E", "-a", "-n", "-b", "-e", pattern, "--", path]


def child_env() -> dict[str, str]:
    """A minimal environment: byte semantics (LC_ALL=C, also the fastest), no GREP_* options."""
    env = {"LC_ALL": "C"}
    if "PATH" in os.environ:
        env["PATH"] = os.environ["PATH"]
    return env


def spawn(cmd: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=child_env(), bufsize=1 << 20
    )


def first_log(argv: list[str]) -> str | None:
    """The first FILE of a plain ``diagnose.py FILE... [--json] [--torch-version X]`` line, else None."""
    paths: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUE_OPTIONS:
            skip = True
        elif arg in _FLAG_OPTIONS or any(arg.startswith(o + "=") for o in _VALUE_OPTIONS):
            continue
        elif arg.startswith("-"):
            return None  # stdin, --symptom, --help, an unknown option: the normal path decides
        else:
            paths.append(arg)
    return paths[0] if paths else None


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size)


def _which(name: str) -> str | None:
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def start(argv: list[str]) -> None:
    """Start grep on the first log of ``argv`` when it is a big plain file; never raises."""
    try:
        if os.environ.get(ENV_SWITCH, "auto").strip().lower() == "python":
            return
        name = first_log(argv)
        if name is None:
            return
        st = os.stat(name)
        if not Path(name).is_file() or st.st_size < GREP_MIN_BYTES:
            return
        with open(name, "rb") as fh:
            if fh.read(2) in _NOT_PLAIN:
                return
        grep = _which("grep")
        pattern = PATTERN_FILE.read_text(encoding="utf-8").strip()
        if grep is None or not pattern:
            return
        cmd = grep_command(grep, pattern, str(Path(name)))
        _started[str(Path(name))] = (cmd, _identity(st), spawn(cmd))
        if len(_started) == 1:
            atexit.register(stop_all)
    except (OSError, ValueError, subprocess.SubprocessError):
        return  # the normal path will report whatever is wrong with the file, in one line


def take(path: Path, cmd: list[str]) -> subprocess.Popen[bytes] | None:
    """The early grep of ``path`` if it runs exactly ``cmd`` on the same file, else None
    (a mismatching early process is killed)."""
    entry = _started.pop(str(path), None)
    if entry is None:
        return None
    early_cmd, identity, proc = entry
    try:
        same_file = _identity(os.stat(path)) == identity
    except OSError:
        same_file = False
    if early_cmd == cmd and same_file and (proc.poll() is None or proc.returncode in (0, 1)):
        return proc
    stop_child(proc)
    return None


def stop_all() -> None:
    """Kill early processes nobody took (bad input found later, an early exit)."""
    while _started:
        _, (_, _, proc) = _started.popitem()
        stop_child(proc)


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """Kill a grep child that is still running, reap it and close its pipes: every caller
    that started one ends it here, so no zombie or open descriptor outlives a read."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def write_pattern() -> str:
    """Regenerate data/diagnose_grep_pattern.txt from the pattern data; returns the pattern."""
    from memtune.diagnose.patterns import load_patterns  # noqa: PLC0415 - PyYAML, only here

    pattern = load_patterns().grep_pattern()
    PATTERN_FILE.write_text(pattern + "\n", encoding="utf-8")
    return pattern


if __name__ == "__main__":  # python3 scripts/memtune/diagnose/early_grep.py --write
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
    if sys.argv[1:] != ["--write"]:
        sys.stderr.write("usage: early_grep.py --write   (regenerates data/diagnose_grep_pattern.txt)\n")
        raise SystemExit(2)
    print(f"wrote {PATTERN_FILE}: {len(write_pattern())} characters")
