"""The examples in every module's docstrings run, as written (issue 17: doctests of all modules in CI)."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import privml

#: modules that need an extra, and the package that tells whether it is installed
OPTIONAL = {"privml.torch": "torch", "privml.serve._asgi": "fastapi", "privml.serve._asgi_server": "uvicorn"}


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(privml.__path__, prefix="privml."):
        extra = next((need for prefix, need in OPTIONAL.items() if info.name.startswith(prefix)), None)
        if extra and importlib.util.find_spec(extra) is None:
            continue
        names.append(info.name)
    return sorted(names)


MODULES = _modules()


def test_the_walk_finds_the_package() -> None:
    assert "privml.accounting._pld" in MODULES and "privml.release" in MODULES and len(MODULES) > 100


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
