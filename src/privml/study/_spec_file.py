"""Reading a study spec from a TOML or YAML file (:func:`load_spec`); the fields are :mod:`privml.study._spec`'s."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from privml._files import read_user_text
from privml.study._spec import StudySpec, spec_from_dict


def load_spec(path: str | Path) -> StudySpec:
    """Read a study from a ``.toml`` file (or ``.yaml`` / ``.yml`` with pyyaml).

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If the file is malformed or describes an invalid study (one line,
        naming the field).
    """
    path = Path(path)
    text = read_user_text(path, "study spec", "a .toml or .yaml file")
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # lazy(extra): pyyaml (study), for YAML specs
        except ImportError:
            raise ValueError(f"{path}: reading YAML needs pyyaml (pip install pyyaml); or write it in TOML") from None
        try:
            raw = yaml.load(text, Loader=_yaml_loader(yaml))  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    else:
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a study spec is a table of fields, got {type(raw).__name__}")
    if isinstance(raw.get("schema"), str) and not Path(raw["schema"]).expanduser().is_absolute():
        raw["schema"] = str(path.parent / raw["schema"])  # a schema beside the spec file, wherever it is run from
    try:
        return spec_from_dict(raw)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _yaml_loader(yaml: Any) -> type:
    """PyYAML's safe loader, reading ``1e-5`` as a number as TOML, JSON and YAML 1.2 do.

    PyYAML follows YAML 1.1, where a float needs a dot (``1.0e-5``): ``delta:
    1e-5``, the way everyone writes a delta, would arrive as the string
    ``'1e-5'`` and be refused.
    """

    class Loader(yaml.SafeLoader):  # type: ignore[name-defined,misc]
        """SafeLoader with one more float form (a subclass, so PyYAML's own loader is untouched)."""

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789")
    )
    return Loader
