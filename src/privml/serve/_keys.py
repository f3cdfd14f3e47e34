"""API keys: the ``--api-keys`` file and the lookup of a request's key."""

from __future__ import annotations

import json
from pathlib import Path

from privml._files import read_user_text
from privml._validation import check_count

__all__ = ["load_api_keys"]


def _printable(key: str) -> bool:
    # Keys travel in an HTTP header: visible ASCII only, no spaces.
    return all(0x21 <= ord(c) <= 0x7E for c in key)


def check_api_keys(keys: object, where: str = "api keys") -> dict[str, int]:
    """Validate ``{key: quota}``: non-empty header-safe keys, integer quotas >= 1."""
    if not isinstance(keys, dict) or not keys:
        raise ValueError(f"{where} must be a non-empty JSON object {{key: quota}}")
    out = {}
    for key, quota in keys.items():
        if not isinstance(key, str) or not key or not _printable(key):
            raise ValueError(f"{where}: every key must be non-empty visible ASCII without spaces")
        try:
            out[key] = check_count(quota, f"{where}: quota of a key")
        except TypeError as exc:  # one error type for a bad file (the CLI maps ValueError to exit 2)
            raise ValueError(str(exc)) from None
    return out


def load_api_keys(path: str | Path) -> dict[str, int]:
    """Read an API-key file: a JSON object mapping each key to its quota."""
    path = Path(path)
    text = read_user_text(path, "API key file", "a JSON file")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not a JSON object of API keys: {str(exc).splitlines()[0]}") from None
    return check_api_keys(data, str(path))
