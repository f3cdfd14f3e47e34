"""The one place where an estimator's constructor stores its hyper-parameters."""

from __future__ import annotations

import inspect
from typing import Any


def keep_params(estimator: object, given: dict[str, Any]) -> None:
    """Store each keyword-only parameter of ``type(estimator).__init__`` as given, under its own name.

    scikit-learn's rule for ``__init__`` (``get_params``, ``clone``): keep every hyper-parameter
    unchanged and do nothing else, so that checks run at ``fit``. Called as
    ``keep_params(self, locals())`` on the first line of a constructor; a ``**`` catch-all is not a
    hyper-parameter and is left to the constructor.
    """
    for name, parameter in inspect.signature(type(estimator).__init__).parameters.items():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            setattr(estimator, name, given[name])
