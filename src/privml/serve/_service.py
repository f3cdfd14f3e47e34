"""The prediction service: what each endpoint means, independent of HTTP.

The service owns the order of operations of a prediction request: validate
the body, authenticate the key, check the width, *then* let the predictor
charge its ledger, and only then compute. Nothing that fails validation
reaches the ledger, and the predictor itself charges before it computes
(the ledger contract of :mod:`privml.ledger._base`).
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeGuard

import numpy as np

from privml.exceptions import BudgetExhausted, LedgerUnavailable
from privml.ledger import BudgetLedger, key_digest
from privml.serve._limits import ServeLimits
from privml.serve._requests import RequestError, parse_predict_body

__all__ = ["PredictionService", "Predictor"]


class Predictor(Protocol):
    """What the server serves.

    A private-prediction model (:mod:`privml.prediction`) has a ``ledger_``
    and its ``predict``/``predict_proba`` take ``key=`` and charge
    ``len(X)`` answers before computing. A privately trained model
    (``ledger_`` absent or ``None``) is served as is: its predictions are
    post-processing of a private release and cost nothing.

    Requests are served concurrently, so ``predict`` must be thread-safe.
    privml's predictors are: their fitted state is read-only, the ledgers
    are thread-safe, and numpy's ``Generator`` locks its bit generator.
    """

    classes_: np.ndarray
    n_features_in_: int
    privacy_: Any

    def predict(self, X: np.ndarray, **kwargs: Any) -> np.ndarray: ...


class _ProbabilityPredictor(Predictor, Protocol):
    """A :class:`Predictor` that also gives class probabilities (charged like ``predict``)."""

    def predict_proba(self, X: np.ndarray, **kwargs: Any) -> np.ndarray: ...


def _gives_probabilities(predictor: Predictor) -> TypeGuard[_ProbabilityPredictor]:
    return callable(getattr(predictor, "predict_proba", None))


def _ledger_errors() -> tuple[type[BaseException], ...]:
    """What a ledger raises when its database is unavailable (503, nothing answered), not a bug (500)."""
    try:
        import psycopg  # lazy(extra): psycopg (postgres)
    except ImportError:  # pragma: no cover - psycopg is optional
        return (sqlite3.Error, LedgerUnavailable)
    return (sqlite3.Error, psycopg.Error, LedgerUnavailable)


_LEDGER_ERRORS = _ledger_errors()


def _raw_width(preprocess: Callable[[np.ndarray], np.ndarray], n_features: int) -> int | None:
    """The row width ``preprocess`` turns into ``n_features`` columns, or ``None`` if none is found.

    Clients send raw rows, so a width error must name the raw width, not the
    model's. The pipeline is data-independent, so probing it with rows of
    zeros reveals nothing; the likely widths (the model's, one less for an
    appended bias) are tried first, then every width up to one more.
    """
    likely = [w for w in (n_features - 1, n_features) if w > 0]
    for width in likely + [w for w in range(1, n_features + 2) if w not in likely]:
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = np.asarray(preprocess(np.zeros((1, width))))
        except (ValueError, TypeError, IndexError):
            continue
        if out.ndim == 2 and out.shape[1] == n_features:
            return width
    return None


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


class PredictionService:
    """Answers ``/predict`` and ``/budget`` for one predictor.

    Parameters
    ----------
    predictor:
        See :class:`Predictor`.
    limits:
        Request limits (rows per request is checked here).
    api_keys:
        ``{key: quota}``; when given, every ``/predict`` and ``/budget``
        request needs a known ``X-API-Key`` and each key spends under its
        quota (set on the predictor's ledger). Only for predictors with a
        ledger: a privately trained model has no budget to share.
    preprocess:
        Data-independent feature pipeline applied to each request's rows
        (e.g. the one recorded in the model file); ``ValueError`` from it
        is a 422.
    class_names:
        Public class names, ``class_names[i]`` for ``classes_[i]``.
    """

    def __init__(
        self,
        predictor: Predictor,
        *,
        limits: ServeLimits | None = None,
        api_keys: dict[str, int] | None = None,
        preprocess: Callable[[np.ndarray], np.ndarray] | None = None,
        class_names: Sequence[Any] | None = None,
    ) -> None:
        self.predictor = predictor
        self.limits = limits or ServeLimits()
        self.ledger: BudgetLedger | None = getattr(predictor, "ledger_", None)
        self.preprocess = preprocess
        self._raw_width: int | None = None  # what preprocess takes, found on the first request
        if getattr(predictor, "classes_", None) is None:
            raise ValueError(f"{type(predictor).__name__} has no classes_: only classifiers can be served")
        classes = [_plain(c) for c in np.asarray(predictor.classes_).tolist()]
        if class_names is not None and len(class_names) != len(classes):
            raise ValueError(f"class_names has {len(class_names)} names for {len(classes)} classes")
        self._label_of = dict(zip(classes, class_names if class_names is not None else classes))
        self.classes = list(self._label_of.values())
        # The same predictor, typed for predict_proba; None when it gives labels only.
        self._proba_predictor = predictor if _gives_probabilities(predictor) else None
        self._proba = self._proba_predictor is not None
        self._digests: frozenset[str] | None = None
        if api_keys is None and self.ledger is not None:
            held = self.ledger.keys()
            if held:
                # Serving anonymously would let any client bypass the quotas the ledger enforces.
                raise ValueError(
                    f"the ledger holds quotas for {len(held)} API key(s): serve it with the keys (--api-keys), "
                    "or anonymous requests would bypass them"
                )
        if api_keys is not None:
            if self.ledger is None:
                raise ValueError(
                    "API keys set quotas of a prediction budget, but this model is privately trained and "
                    "has no budget to share"
                )
            total, budget = sum(api_keys.values()), self.ledger.state().budget
            if total > budget:
                raise ValueError(
                    f"the API keys' quotas sum to {total} answers, more than the budget of {budget}: "
                    "some keys would be refused before their quota; lower the quotas"
                )
            for key, quota in api_keys.items():
                self.ledger.set_quota(key, quota)
            self._digests = frozenset(key_digest(k) for k in api_keys)

    @property
    def requires_key(self) -> bool:
        return self._digests is not None

    @property
    def supports_probabilities(self) -> bool:
        return self._proba

    @property
    def n_features(self) -> int:
        return int(self.predictor.n_features_in_)

    def authenticate(self, header: str | None) -> str | None:
        """The request's API key, or ``None`` when keys are not in use.

        Raises
        ------
        RequestError
            401 when keys are in use and the header is missing or unknown.
        """
        if self._digests is None:
            return None
        if not header:
            raise RequestError(401, "missing X-API-Key header")
        # Compare digests: the lookup time says nothing about the raw keys.
        if key_digest(header) not in self._digests:
            raise RequestError(401, "unknown API key")
        return header

    def predict(self, body: bytes, key: str | None = None) -> dict[str, Any]:
        """Answer a ``POST /predict`` body (already authenticated)."""
        request = parse_predict_body(body, max_rows=self.limits.max_rows,
                                     text=getattr(self.preprocess, "accepts_text", False))
        X = request.rows
        if self.preprocess is not None:
            raw_width = self._raw_input_width()
            # Before preprocessing: its own error would be numpy's broadcast message.
            if raw_width and X.shape[1] != raw_width:
                raise RequestError(422, f"rows have {X.shape[1]} values; the model expects {self._expected_width()}")
            try:
                # Extreme values may overflow in scaling: caught below as non-finite, not warned about.
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    X = np.asarray(self.preprocess(X), dtype=np.float64)
            except ValueError as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise RequestError(422, f"rows do not fit the model's preprocessing: {reason}") from None
            if not np.all(np.isfinite(X)):
                raise RequestError(422, "rows hold values too large for the model's preprocessing")
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise RequestError(
                422, f"rows have {request.rows.shape[1]} values; the model expects {self._expected_width()}"
            )
        if request.probabilities and not self._proba:
            raise RequestError(422, "this model does not give probabilities: send \"probabilities\": false")
        kwargs = {} if self.ledger is None else {"key": key}
        try:
            if request.probabilities:
                assert self._proba_predictor is not None  # refused with 422 above otherwise
                # One call, one charge: the labels are read off the released
                # probabilities (post-processing), not paid for twice.
                proba = np.asarray(self._proba_predictor.predict_proba(X, **kwargs), dtype=np.float64)
                raw = np.asarray(self.predictor.classes_)[np.argmax(proba, axis=1)]
            else:
                proba = None
                raw = np.asarray(self.predictor.predict(X, **kwargs))
        except BudgetExhausted as exc:
            raise RequestError(429, str(exc).splitlines()[0]) from None
        except NotImplementedError as exc:
            # Predictors that release labels only refuse predict_proba before charging.
            raise RequestError(422, f"{str(exc).splitlines()[0]}: send \"probabilities\": false") from None
        except _LEDGER_ERRORS:
            raise RequestError(503, "the budget ledger is unavailable; nothing was answered") from None
        out: dict[str, Any] = {"labels": [self._label_of[_plain(v)] for v in raw.tolist()]}
        if proba is not None:
            out["probabilities"] = proba.tolist()
            out["classes"] = self.classes
        return out

    def _raw_input_width(self) -> int:
        """The raw row width the preprocessing takes (found once), or 0 when it cannot be found."""
        if self._raw_width is None:
            assert self.preprocess is not None
            # A schema's pipeline states its width (its columns); others are probed.
            stated = getattr(self.preprocess, "raw_width", None)
            self._raw_width = stated if isinstance(stated, int) else _raw_width(self.preprocess, self.n_features) or 0
        return self._raw_width

    def _expected_width(self) -> str:
        if self.preprocess is None:
            return str(self.n_features)
        if not self._raw_input_width():
            return f"{self.n_features} after preprocessing"
        return f"{self._raw_width} ({self.n_features} after preprocessing)"

    def budget(self, key: str | None = None) -> dict[str, Any]:
        """The ``GET /budget`` document."""
        privacy = self.predictor.privacy_
        out: dict[str, Any] = {
            "spent": 0,
            "remaining": None,
            "budget": None,
            "epsilon": float(privacy.epsilon),
            "delta": float(privacy.delta),
            "neighbouring": privacy.neighbouring.value,
            "neighbouring_detail": privacy.neighbouring.detail,
        }
        if self.ledger is not None:
            try:
                state = self.ledger.state()
                key_state = self.ledger.state(key) if key is not None else None
            except _LEDGER_ERRORS:
                raise RequestError(503, "the budget ledger is unavailable") from None
            out.update(state.to_dict())
            if key_state is not None:
                out["key"] = {"quota": key_state.budget, "spent": key_state.spent, "remaining": key_state.remaining}
        return out

    def health(self) -> dict[str, Any]:
        """The ``GET /healthz`` document."""
        return {"status": "ok"}
