"""One root for privml's exceptions and one for its warnings (issue 33 item 6), each keeping its built-in base."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import privml
from privml.exceptions import BudgetExhausted, LedgerUnavailable, PrivmlError, PrivmlWarning


def _privml_classes() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(privml.__path__, "privml."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra this environment lacks
            continue
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == module.__name__ and issubclass(obj, BaseException):
                found.append(obj)
    return found


def test_every_privml_exception_and_warning_has_the_root():
    classes = _privml_classes()
    assert len(classes) >= 20  # the scan saw them (not vacuous)
    loose = [f"{c.__module__}.{c.__qualname__}" for c in classes
             if not issubclass(c, PrivmlWarning if issubclass(c, Warning) else PrivmlError)]
    assert loose == []


@pytest.mark.parametrize(("cls", "builtin"), [(BudgetExhausted, RuntimeError), (LedgerUnavailable, ValueError)])
def test_the_roots_keep_the_builtin_bases_callers_catch(cls, builtin):
    assert issubclass(cls, PrivmlError) and issubclass(cls, builtin)
    with pytest.raises(builtin):
        raise cls("x")
