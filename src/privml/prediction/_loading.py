"""Open a model file as something that answers queries, privately.

:func:`load_predictor` is what ``privml predict`` and the HTTP server use.
It returns one of three kinds of object, all with the same serving contract:

- ``predict(X, *, key=None)`` and ``predict_proba(X, *, key=None)``: answers,
  one per row of ``X`` (``predict_proba`` of subsample-and-aggregate raises
  :class:`NotImplementedError` before charging anything: it releases labels only);
- ``ledger_``: the :class:`~privml.ledger.BudgetLedger` the answers are charged
  to, or ``None`` when answers are free;
- ``privacy_``: the :class:`~privml.guarantee.PrivacyGuarantee` of everything
  the object will ever release;
- ``classes_`` and ``n_features_in_``.

Which object depends on the file's method:

- ``nonprivate``: a :class:`~privml.prediction.PredictionSensitivity` built by
  :meth:`~privml.prediction.PredictionSensitivity.from_model`; needs
  ``epsilon`` and ``budget`` (``delta`` and ``accountant`` optional).
- ``prediction-sensitivity``: a :class:`~privml.prediction.PredictionSensitivity`
  with the saved settings; given values override them.
- ``subsample-aggregate``: a :class:`~privml.prediction.SubsampleAndAggregate`
  with the saved settings; given values override them.
- ``output``, ``objective``, ``dpsgd``, ``dpcd``, ``dpcd-regressor``,
  ``accuracy-first``, ``dpsgd-cnn``, ``scatter-linear``, ``scatter-cnn`` (the ``torch`` extra): the
  privately trained model as is, with ``ledger_ = None``; passing
  ``epsilon``, ``delta``, ``budget``, ``method``, ``accountant``, a ledger
  or a ``random_state`` (it draws no noise) is an error.

A privately trained model's release is already private, so its
predictions are post-processing and cost nothing; its ``predict`` takes no
``key`` (callers that pass one must drop it).

The ledger is never stored in the model file. With ``ledger=None`` a fresh
in-memory ledger starts at zero answers on every load, so the budget is only
enforced within one process: serve from a persistent ledger (SQLite,
PostgreSQL) to enforce it across restarts and processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from privml._random import RandomState
from privml.io import model_from_file, read_model_file, restore_model
from privml.ledger import BudgetLedger
from privml.prediction._sensitivity import PredictionSensitivity
from privml.registry import Kind, names_of_kind

__all__ = [
    "PREDICTION_METHODS",
    "PRIVATE_TRAINING_METHODS",
    "load_predictor",
    "refuse_privacy_settings",
]

#: Model-file methods whose answers are charged to a budget (from :mod:`privml.registry`).
PREDICTION_METHODS = names_of_kind(Kind.PRIVATE_PREDICTION)
#: Model-file methods whose release is already private (their predictions are free).
PRIVATE_TRAINING_METHODS = names_of_kind(Kind.PRIVATE_TRAINING, Kind.SELECTION)


def _overrides(**settings: Any) -> dict[str, Any]:
    return {name: value for name, value in settings.items() if value is not None}


def refuse_privacy_settings(path: str | Path, stored: str, **given: Any) -> None:
    """The one refusal of privacy settings for a privately trained model: its predictions cost no privacy.

    ``given`` maps each setting's name (``ledger_name`` is said "ledger name") to its value, ``None``
    meaning not given; any given one is a ``ValueError`` naming them all.
    """
    names = [name.replace("_name", " name") for name, value in given.items() if value is not None]
    if names:
        raise ValueError(
            f"{path} holds a privately trained model ({stored}): its predictions cost no privacy, so it takes "
            f"no {', '.join(names)}"
        )


def load_predictor(
    path: str | Path,
    *,
    method: str | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    budget: int | None = None,
    accountant: str | None = None,
    ledger: BudgetLedger | None = None,
    random_state: RandomState = None,
    contents: tuple[dict[str, np.ndarray], dict] | None = None,
) -> Any:
    """A query-answering object for the model file at ``path`` (see the module docstring).

    Parameters
    ----------
    path : str or Path
        A model file written by :func:`privml.io.save_model`, read once (or named in errors, with ``contents``).
    method : {"prediction-sensitivity", "subsample-aggregate"}, optional
        The private-prediction method; must match the file (a ``nonprivate``
        file serves ``"prediction-sensitivity"`` only). Default: the file's.
    epsilon, delta, budget, accountant :
        The per-deployment guarantee; ``None`` means not given. Required
        (epsilon, budget) for a ``nonprivate`` file, where delta defaults
        to 0 and accountant to ``"auto"``; for a prediction-sensitivity or
        subsample-and-aggregate file every given value overrides the saved
        setting, ``delta = 0`` included (pure DP, refused by the calibration
        where the method or accountant cannot give it).
    ledger : BudgetLedger, optional
        Where answers are charged; its budget must equal the budget.
        Default: a fresh in-memory ledger.
    random_state : None, int or numpy Generator, optional
        Source of the noise; None (OS entropy) in deployment.
    contents : (arrays, metadata), optional
        The file as :func:`privml.io.read_model_file` returned it, for a caller that has read it already.

    Returns
    -------
    PredictionSensitivity, SubsampleAndAggregate, or a privml linear estimator

    Raises
    ------
    ValueError
        for a file that is not a privml model, a method that does not match
        the file, missing epsilon/budget for a non-private file, or any
        privacy setting passed for a privately trained model.
    FileNotFoundError
        if ``path`` does not exist.
    """
    # long-function: a long numpy-style docstring (parameters, guarantee, references) and code that is one dispatch on
    # the model file's method with a precise error for each misuse.
    arrays, metadata = read_model_file(path) if contents is None else contents
    stored = metadata.get("method")
    if stored in PRIVATE_TRAINING_METHODS:
        refuse_privacy_settings(path, stored, method=method, epsilon=epsilon, delta=delta, budget=budget,
                                accountant=accountant, ledger=ledger, random_state=random_state)
        model = model_from_file(arrays, metadata, path)
        model.ledger_ = None
        return model
    if stored == "nonprivate-cnn":
        raise ValueError(
            f"{path} holds a non-private CNN: no private prediction method in privml serves one network (prediction "
            "sensitivity is for linear models); train a private one (--method dpsgd-cnn), or teachers for "
            "subsample-and-aggregate"
        )
    if stored == "nonprivate":
        if method not in (None, "prediction-sensitivity"):
            raise ValueError(
                f"{path} holds one non-private model, which can be served by prediction-sensitivity only "
                f"(subsample-and-aggregate needs a file of teachers), not {method!r}"
            )
        if epsilon is None or budget is None:
            missing = [name for name, value in (("epsilon", epsilon), ("budget", budget)) if value is None]
            raise ValueError(
                f"{path} holds a non-private model: serving it privately needs {' and '.join(missing)} "
                "(the total guarantee over the budget of answers)"
            )
        return PredictionSensitivity.from_model(
            model_from_file(arrays, metadata, path), epsilon=epsilon, delta=0.0 if delta is None else delta,
            budget=budget, accountant="auto" if accountant is None else accountant,
            ledger=ledger, random_state=random_state,
        )
    if stored in PREDICTION_METHODS:
        if method not in (None, stored):
            raise ValueError(f"{path} holds a {stored} model, not {method!r}")
        model = model_from_file(arrays, metadata, path)
        # An explicit delta = 0 asks for pure DP: it overrides a saved delta > 0 like any given value.
        settings = _overrides(epsilon=epsilon, budget=budget, random_state=random_state, delta=delta,
                              accountant=accountant)
        model.set_params(**settings, ledger=ledger)
        # Given settings the method cannot honour (e.g. delta = 0 with gdp accounting) are the caller's error,
        # said as such, not reported as an inconsistent file by the restore below.
        model._check_hyperparameters()
        # Recalibrate from the (possibly new) settings; the saved noise is never trusted.
        restore_model(model, arrays, metadata, path)
        return model
    raise ValueError(f"{path}: the model method {stored!r} cannot answer classification queries")
