"""Renamed constructor parameters: accepted for one release, with a FutureWarning naming the new name.

privml's estimators share one vocabulary (``epsilon``, ``delta``, ``l2``,
``clip_norm``, ``accountant``, ``classes``, ``random_state``). Older names
still work for one release: an estimator lists them in ``_renamed_params``
and takes them through ``**deprecated`` in ``__init__`` (scikit-learn's
``get_params`` ignores a ``**`` parameter, so clones and model files carry the
new names only; the advertised signature leaves it out altogether) and through
:meth:`RenamedParams.set_params`.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = ["RenamedParams", "warn_renamed"]


def warn_renamed(owner: str, old: str, new: str, *, stacklevel: int = 3) -> None:
    """The one deprecation message: ``owner``'s parameter ``old`` is now ``new``."""
    warnings.warn(
        f"{owner}: the parameter {old!r} is deprecated and will be removed in the next release; use {new} instead",
        FutureWarning,
        stacklevel=stacklevel + 1,
    )


class RenamedParams:
    """Mixin for estimators that accept deprecated parameter names (put it before ``BaseEstimator``).

    ``_renamed_params`` maps each old name to the text naming its replacement
    (usually just the new parameter name). :meth:`_translate_renamed` turns the
    old names given into new ones; override it when one old setting maps to
    several new ones.
    """

    #: old parameter name -> what replaces it (shown in the FutureWarning)
    _renamed_params: ClassVar[Mapping[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        signature = inspect.signature(init)
        current = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        if len(current) < len(signature.parameters):
            # The advertised signature is the current vocabulary: help(), the docs and every
            # caller that reads it (scikit-learn's checks, option lists) never see the old names.
            init.__signature__ = signature.replace(parameters=current)

    def _translate_renamed(self, old: dict[str, Any]) -> dict[str, Any]:
        """New-name settings for the deprecated ``old`` ones (default: a plain rename)."""
        return {self._renamed_params[name]: value for name, value in old.items()}

    def _take_renamed(self, old: dict[str, Any], *, given: Mapping[str, Any] | None = None) -> None:
        """Apply deprecated ``old`` settings: warn, translate, and set the new attributes.

        ``given`` holds new-name settings passed in the same call (``set_params``);
        from ``__init__`` (``given=None``) a new parameter counts as given when it
        differs from its default. Giving both names of one setting is refused.
        """
        owner = type(self).__name__
        unknown = sorted(set(old) - set(self._renamed_params))
        if unknown:
            raise TypeError(f"{owner} got an unexpected keyword argument {unknown[0]!r}")
        for name in old:
            warn_renamed(owner, name, self._renamed_params[name], stacklevel=3)
        defaults = inspect.signature(type(self).__init__).parameters
        for new, value in self._translate_renamed(old).items():
            if given is not None:
                clash = new in given
            else:
                default = defaults[new].default
                current = getattr(self, new)
                clash = current is not default and bool(current != default)
            if clash:
                names = " and ".join(repr(n) for n in sorted(old))
                raise TypeError(f"{owner} got both {new!r} and the deprecated {names}: pass {new!r} only")
            setattr(self, new, value)

    def set_params(self, **params: Any) -> Any:
        """scikit-learn's ``set_params``, also accepting the deprecated names (with a FutureWarning)."""
        old = {name: params.pop(name) for name in list(params) if name in self._renamed_params}
        if old:
            self._take_renamed(old, given=params)
        return super().set_params(**params)  # type: ignore[misc]
