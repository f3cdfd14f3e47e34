"""Reading a small text file the user names (an API-key file, a study spec), with one-line errors."""

from __future__ import annotations

from pathlib import Path

__all__ = ["read_user_text"]


def read_user_text(path: Path, what: str, expected: str) -> str:
    """The UTF-8 text of ``path``; ``what`` names the file in errors, ``expected`` says what it should be.

    A directory is a ``ValueError`` ("not found" would send the user looking for a file that is there), a
    missing file a ``FileNotFoundError``, a binary file a ``ValueError`` that names it (the bare codec message
    does not, and quotes its bytes).
    """
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory, not {expected}")
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (not UTF-8); {what} is {expected}") from None
