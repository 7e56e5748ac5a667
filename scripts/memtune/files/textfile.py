"""Read a user's input file as text, or say in one line why it is not one.

Every loader (HF config.json, Bridge YAML, launch script, env file, flag mapping) gets
paths typed by a person or an agent, and the common mistakes are the same: the wrong file
(a binary, a checkpoint, a PNG) or a file in another encoding. Without this, the first
symptom is a ``UnicodeDecodeError`` traceback, or garbage bytes quoted back in an error
line. Stdlib only, so it can be imported by command modules before argument parsing.
"""

from __future__ import annotations

from pathlib import Path

from memtune.errors import InputError
from memtune.units import KIB, MIB

SNIFF_BYTES = 64 << 10  # a NUL byte this early never occurs in a text file
# Configs, launch scripts, recipes, env files and signing material are kilobytes; anything
# past this is the wrong file (a log, a checkpoint, /dev/zero) and would only exhaust memory.
# Logs are not read through here: diagnose.py streams them.
MAX_INPUT_BYTES = 2 << 20


def read_bounded(path: str | Path, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """At most ``limit`` bytes of ``path``; InputError naming the limit when there are more.

    Reads ``limit + 1`` bytes and stops, so an endless device or a huge file costs no more.
    """
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise InputError(
            f"{path}: larger than the {_size(limit)} limit for {what}; "
            "check the path (a log, a checkpoint or a device is not an input here)"
        )
    return data


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit >= MIB else f"{limit // KIB} KiB"


def read_text(path: str | Path, what: str, *, strict: bool = True, limit: int = MAX_INPUT_BYTES) -> str:
    """The file's text; InputError for a binary file, or (``strict``) one that is not UTF-8.

    ``what`` names the expected content ("a Hugging Face config.json"), so the message
    says what to pass instead. ``strict=False`` keeps undecodable bytes as U+FFFD, for
    formats where a stray Latin-1 byte in a comment should not stop the check. Files above
    ``limit`` bytes are refused before they are decoded.
    """
    data = read_bounded(path, what, limit)
    if b"\x00" in data[:SNIFF_BYTES]:
        raise InputError(f"{path}: a binary file (NUL bytes) where {what} was expected; check the path")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark (Windows editors) is not content
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not strict:
            return data.decode("utf-8", errors="replace")
        raise InputError(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); pass {what} saved as UTF-8"
        ) from None


def one_line(message: object, limit: int = 200) -> str:
    """An exception's text as one short line (YAML errors span several lines and name
    the internal stream "<unicode string>", which means nothing to the user)."""
    text = " ".join(str(message).replace('in "<unicode string>",', "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def yaml_syntax_error(path: str | Path, exc: Exception) -> InputError:
    """The one-line InputError for a YAML file that does not parse: file, line, problem.

    PyYAML's own message spans several lines and shows the parser's context; the user
    needs where it broke and what the parser expected there.
    """
    mark = getattr(exc, "problem_mark", None)
    where = f":{mark.line + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or exc
    return InputError(f"{path}{where}: not valid YAML ({one_line(problem, 120)}); fix the syntax")
