"""Black-box audit of the private prediction service: a lower bound on the epsilon of ONE answer.

A private predictor (:mod:`privml.prediction`) keeps a non-private model
secret and randomises every answer; its guarantee covers a budget of ``B``
answers, and under basic composition with ``delta = 0`` each answer is
``epsilon_q = epsilon / B``-DP (:mod:`privml.prediction._calibration`). The
audit checks that per-answer claim the way a client of ``privml serve``
sees it:

1. Build neighbours D and D' under the method's relation (replace-one for
   both methods: D' replaces the canary's mirror record by the canary,
   :func:`~privml.audit.neighbouring_pair`).
2. Train the private predictor on each, with the same training seed (the
   same random partition of subsample-and-aggregate, so the canary lies in
   the same part), configured for ``epsilon = epsilon_q * N``, ``delta =
   0``, ``budget = N`` and basic composition: ``epsilon_q`` per answer.
3. Save each to a model file and open it as ``privml serve`` does:
   :func:`~privml.prediction.load_predictor` (a fresh in-memory ledger of
   exactly ``N`` answers, fresh noise per world) behind the
   :class:`~privml.serve.PredictionService`, fed JSON bodies
   in-process. A class that is not the registry's (a negative control, a
   user's subclass) is read back into its own class, since the file names
   only the method.
4. Ask the same query ``N`` times in each world; answer ``N + 1`` must be
   refused (HTTP 429).
5. Score each answer (prediction sensitivity: the log-odds of the canary's
   class from the served probabilities, a post-processing of the noisy
   logits; subsample-and-aggregate: whether the served label is the
   canary's) and bound epsilon with
   :func:`~privml.audit.epsilon_lower_bound` (threshold chosen
   on half of the answers, Clopper-Pearson bound on the other half).

Given the two trained models, the ``N`` answers of a world are independent
draws of one answer's mechanism, so the bound is on the epsilon of one
answer, compared like for like with ``epsilon_q`` under the same relation.

Where the audit asks (``query``): prediction sensitivity at the canary's
point, where the mirror replacement moves the logits the most (with the
Huber hinge, the audit's default loss for two classes, and a canary in a
direction the data do not use, by exactly the sensitivity ``2L/(n
lambda)``). Subsample-and-aggregate at the canary's point shifted along the
line between the two labels' class means to where the other teachers split
their votes evenly (``query="auto"``): one record changes one vote, and an
exponential mechanism's ratio shows best when the vote is close. The point
is chosen by the auditor from the teachers it trained, before any answer is
drawn; the guarantee holds for every fixed query, so the bound stays valid.

Everything here is computed from the training records without noise: an
audit is a test, not a release; run it on data you may look at.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from privml._random import RandomState
from privml._validation import check_count, check_epsilon, check_finite_array
from privml.audit._canaries import Canary, make_canary, neighbouring_pair
from privml.audit._epsilon_lower_bound import AuditResult
from privml.audit._membership import roc_auc
from privml.audit._threshold_test import epsilon_lower_bound
from privml.audit._trials import _root_seed
from privml.guarantee import PrivacyGuarantee
from privml.io import read_model_file, restore_model, save_model
from privml.prediction._base import BudgetedPredictor
from privml.prediction._loading import load_predictor
from privml.registry import estimator_class, get_spec
from privml.release import strip_seeds
from privml.serve._limits import ServeLimits
from privml.serve._requests import RequestError
from privml.serve._service import PredictionService

__all__ = [
    "DEFAULT_TEACHERS",
    "MAX_QUERIES",
    "PREDICTION_AUDIT_METHODS",
    "QUERY_POINTS",
    "audit_prediction_service",
    "check_audit_settings",
    "split_vote_query",
]

#: Private-prediction methods the audit trains (from :mod:`privml.registry`).
PREDICTION_AUDIT_METHODS = ("prediction-sensitivity", "subsample-aggregate")
#: Named query points (an array of features is also accepted).
QUERY_POINTS = ("auto", "canary")
#: Answers per world at most (each is a row of a JSON request).
MAX_QUERIES = 10**7
#: Settings the audit fixes so that each answer is epsilon_q-DP (given ``params`` may not set them).
_FIXED = ("epsilon", "delta", "budget", "accountant", "classes", "random_state", "ledger")
#: Teachers of subsample-and-aggregate when ``params`` do not say.
DEFAULT_TEACHERS = 8
# The split search: points on the line between the class means, and weights of the canary's direction.
_LINE = np.linspace(-1.0, 2.0, 601)
_ALPHAS = (0.0, *np.geomspace(1e-3, 1e3, 25).tolist())
_REFINE_ROUNDS, _REFINE_POINTS = 4, 16


def _settings(method: str | None, n_classes: int, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The method's audit defaults overridden by ``params`` (which may not set what the audit fixes)."""
    params = dict(params or {})
    fixed = sorted(set(params) & set(_FIXED))
    if fixed:
        raise ValueError(f"params may not set {', '.join(fixed)}: the audit sets them from epsilon_query and "
                         "queries (delta = 0, basic composition, a fresh ledger of exactly the queries asked)")
    if method is not None:
        cls: Any = estimator_class(method)
        unknown = sorted(set(params) - set(cls._get_param_names()))
        if unknown:
            raise ValueError(f"params: {', '.join(unknown)} does not apply to {method}")
    defaults: dict[str, Any] = {}
    if method == "prediction-sensitivity" and n_classes == 2:
        # Its gradient stays at the Lipschitz bound, so the mirror canary realises the sensitivity bound.
        defaults["loss"] = "huber"
    if method == "subsample-aggregate":
        defaults["n_models"] = DEFAULT_TEACHERS
    return {**defaults, **params}


def _factory(method: Any) -> tuple[Callable[..., Any], str | None]:
    """(what builds a predictor, its method name if known before building one)."""
    if isinstance(method, str):
        if method not in PREDICTION_AUDIT_METHODS:
            raise ValueError(f"method must be one of {', '.join(PREDICTION_AUDIT_METHODS)} or a factory of a "
                             f"private predictor, got {method!r}")
        return estimator_class(method), method
    if not callable(method):
        raise TypeError(f"method must be a method name or a callable returning a predictor, "
                        f"got {type(method).__name__}")
    name = getattr(method, "method", None)
    return method, name if isinstance(name, str) else None


def _world_settings(name: str | None, n_classes: int, params: Mapping[str, Any] | None, epsilon_query: float,
                    queries: int) -> dict[str, Any]:
    """A world's predictor settings but its class set and seed: each answer epsilon_query-DP, a budget of queries."""
    return {**_settings(name, n_classes, params), "epsilon": epsilon_query * queries, "delta": 0.0,
            "budget": queries, "accountant": "basic"}


def check_audit_settings(
    method: str | Callable[..., Any], *, epsilon_query: float, queries: int, params: Mapping[str, Any] | None = None,
    confidence: float = 0.95, rows_per_request: int = 1000,
) -> tuple[Callable[..., Any], str | None, float, int, int]:
    """The settings of :func:`audit_prediction_service` that need no data, checked first by it (and by a caller
    that reads the data itself, before it does: ``privml audit --prediction-service``); the predictor's own
    check runs on one representative instance (two classes: the data's set is checked with the data).

    Returns (the factory, its method name if known, epsilon_query, queries, rows_per_request); ValueError (one
    line) otherwise.
    """
    factory, name = _factory(method)
    epsilon_query = check_epsilon(epsilon_query, "epsilon_query")
    queries = check_count(queries, "queries", minimum=4, maximum=MAX_QUERIES)
    rows_per_request = check_count(rows_per_request, "rows_per_request")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if name is not None:  # a factory of unknown method is built and checked with the data's class set only
        settings = _world_settings(name, 2, params, epsilon_query, queries)
        _build(factory, {**settings, "classes": (0, 1)})._check_hyperparameters()
    return factory, name, epsilon_query, queries, rows_per_request


def _check_query(query: Any, n_features: int) -> str | np.ndarray:
    if isinstance(query, str):
        if query not in QUERY_POINTS:
            raise ValueError(f"query must be one of {', '.join(QUERY_POINTS)} or a feature vector, got {query!r}")
        return query
    point = check_finite_array(query, "query", ndim=1)
    if point.shape != (n_features,):
        raise ValueError(f"query has {point.size} features, the data {n_features}")
    return point


def _build(factory: Callable[..., Any], settings: dict[str, Any]) -> BudgetedPredictor:
    model = factory(**settings)
    if not isinstance(model, BudgetedPredictor) or model.method not in PREDICTION_AUDIT_METHODS:
        raise TypeError(f"the factory must return a private predictor ({', '.join(PREDICTION_AUDIT_METHODS)}), "
                        f"got {type(model).__name__}")
    return model


def _open(path: Path, cls: type[BudgetedPredictor], seed: int) -> Any:
    """Read a model file as ``privml serve`` does; a class other than the registry's is read into itself."""
    if cls is estimator_class(cls.method):
        return load_predictor(path, random_state=seed)
    arrays, metadata = read_model_file(path)
    model = cls(**strip_seeds(metadata["params"]))
    model.set_params(random_state=seed)
    return restore_model(model, arrays, metadata, path)


def _per_answer_epsilon(predictor: Any) -> float:
    """epsilon / B of a predictor calibrated by basic composition at delta = 0 (refused otherwise)."""
    privacy = predictor.privacy_
    if privacy.accountant != "basic" or privacy.delta != 0:
        raise ValueError(f"{type(predictor).__name__} is calibrated by {privacy.accountant} at delta = "
                         f"{privacy.delta}: the audit needs basic composition at delta = 0 (epsilon / B per answer)")
    return float(privacy.epsilon) / predictor.ledger_.state().budget


def _labels(teachers: list[Any], rows: np.ndarray) -> np.ndarray:
    return np.stack([np.asarray(t.predict(rows)) for t in teachers])


def _separated_votes(labels: Callable[[np.ndarray], np.ndarray], t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points ``t`` of a line and the teachers' labels there, refined until one teacher changes at a time.

    Teachers trained on parts of the same data cross a line at nearby points;
    where two or more change their vote between neighbouring points, points
    are added between them (a few rounds, so identical teachers end it).
    """
    votes = labels(t)
    for _ in range(_REFINE_ROUNDS):
        changes = np.count_nonzero(votes[:, 1:] != votes[:, :-1], axis=0)
        crowded = np.flatnonzero(changes > 1)
        if crowded.size == 0:
            break
        extra = np.concatenate([np.linspace(t[i], t[i + 1], _REFINE_POINTS + 2)[1:-1] for i in crowded])
        t = np.concatenate([t, extra])
        order = np.argsort(t, kind="stable")
        t, votes = t[order], np.hstack([votes, labels(extra)])[:, order]
    return t, votes


def split_vote_query(
    served_out: Any, served_in: Any, canary: Canary, X: np.ndarray, y: np.ndarray
) -> np.ndarray | None:
    """A query where the canary's teacher votes its world's label and the other teachers split evenly.

    Points ``alpha * canary.x + a + t (b - a)``, with ``a`` and ``b`` the
    mean records of the replaced label and of the canary's label, over a grid
    of ``alpha`` and ``t``. Kept: points where the one teacher that differs
    between the worlds votes ``canary.replaced_y`` on D and ``canary.y`` on D'.
    Chosen: the one where, on D', the replaced label leads the canary's by
    ``m mod 2`` votes (``m`` teachers), or as close as the grid allows, a
    smaller lead counting worse than a larger one: with the canary's label
    ahead on D' the lead is small on both sides, and the ratio of the two
    worlds' vote probabilities shows only half of ``epsilon_q``. None
    when no teacher or more than one differs (the worlds were not trained on
    one partition) or no point makes the canary's teacher change its vote.
    """
    out_teachers, in_teachers = served_out.teachers_, served_in.teachers_
    changed = [i for i, (a, b) in enumerate(zip(out_teachers, in_teachers, strict=True))
               if not np.array_equal(a.weights_, b.weights_)]
    if len(changed) != 1:
        return None
    c = changed[0]
    start = X[y == canary.replaced_y].mean(axis=0) if np.any(y == canary.replaced_y) else np.zeros(X.shape[1])
    end = X[y == canary.y].mean(axis=0) if np.any(y == canary.y) else np.zeros(X.shape[1])
    target = len(in_teachers) % 2
    best: tuple[float, np.ndarray] | None = None
    for alpha in _ALPHAS:
        offset = start + alpha * np.asarray(canary.x, dtype=np.float64)

        def labels(t: np.ndarray, offset: np.ndarray = offset) -> np.ndarray:
            rows = offset + t[:, None] * (end - start)
            return np.vstack([_labels(in_teachers, rows), _labels([out_teachers[c]], rows)])

        t, votes = _separated_votes(labels, _LINE)
        flips = (votes[c] == canary.y) & (votes[-1] == canary.replaced_y)
        votes = votes[:-1]
        lead = np.sum(votes == canary.replaced_y, axis=0) - np.sum(votes == canary.y, axis=0)
        cost = np.where(flips, np.abs(lead - target) + 0.5 * (lead < target), np.inf)
        i = int(np.argmin(cost))
        if math.isfinite(cost[i]) and (best is None or cost[i] < best[0]):
            best = (float(cost[i]), offset + t[i] * (end - start))
        if best is not None and best[0] == 0:
            break
    return None if best is None else best[1]


def _body(point: np.ndarray, rows: int, probabilities: bool) -> bytes:
    return json.dumps({"rows": [point.tolist()] * rows, "probabilities": probabilities}).encode()


def _ask(service: PredictionService, point: np.ndarray, n: int, per_request: int, probabilities: bool) -> list:
    """``n`` answers to ``point`` through the service, ``per_request`` rows per JSON request."""
    answers: list = []
    while len(answers) < n:
        reply = service.predict(_body(point, min(per_request, n - len(answers)), probabilities))
        answers.extend(reply["probabilities"] if probabilities else reply["labels"])
    return answers


def _after_budget(service: PredictionService, point: np.ndarray, probabilities: bool) -> str:
    """What the service does with answer N + 1: "refused" (429) is the only right outcome."""
    try:
        service.predict(_body(point, 1, probabilities))
    except RequestError as exc:
        return "refused" if exc.status == 429 else f"error {exc.status}"
    return "answered"


def _query_point(
    point: str | np.ndarray, query: Any, canary: Canary, served: list[Any], pair: Any, probabilities: bool
) -> tuple[np.ndarray, str]:
    """The row asked N times in each world, and how it was chosen ("canary", "split vote" or "given")."""
    if not isinstance(point, str):
        return point, "given"
    if query == "auto" and not probabilities:
        # The base records are those of both worlds but the last (the canary or the record it replaces).
        split = split_vote_query(served[0], served[1], canary, pair.X_in[:-1], pair.y_in[:-1])
        if split is not None:
            return split, "split vote"
    return np.asarray(canary.x, dtype=np.float64), "canary"


def _scores(answers: list, canary_index: int, canary_label: object, probabilities: bool) -> np.ndarray:
    """One statistic per answer, larger when the canary is in."""
    if not probabilities:
        return np.asarray([1.0 if label == canary_label else 0.0 for label in answers])
    p = np.clip(np.asarray(answers, dtype=np.float64), 1e-300, 1.0)
    others = np.clip(np.delete(p, canary_index, axis=1).sum(axis=1), 1e-300, None)
    return np.log(p[:, canary_index]) - np.log(others)


def _class_set(y: np.ndarray, classes: Any, canary_label: object) -> tuple:
    if classes is not None:
        return tuple(c.item() if isinstance(c, np.generic) else c for c in classes)
    known = np.unique(y if canary_label is None else np.append(y, np.asarray(canary_label)))
    return tuple(known.tolist())


def _train_and_open(models: list[BudgetedPredictor], pair: Any, seeds: list[int]) -> list[Any]:
    """Fit each world's predictor, save it, and read it back as the server does (the file is then deleted)."""
    worlds = ((pair.X_out, pair.y_out), (pair.X_in, pair.y_in))
    opened = []
    with tempfile.TemporaryDirectory(prefix="privml-audit-") as tmp:
        for model, (X_w, y_w), name, seed in zip(models, worlds, ("out", "in"), seeds, strict=True):
            model.fit(X_w, y_w)
            # The file holds the non-private model (a server's secret): it lives in the temporary directory only.
            path = save_model(model, Path(tmp) / f"{name}.npz")
            opened.append(_open(path, type(model), seed))
    return opened


def audit_prediction_service(
    method: str | Callable[..., Any],
    X: Any,
    y: Any,
    *,
    epsilon_query: float,
    queries: int,
    canary: str | Canary = "clipbkd",
    canary_label: object | None = None,
    query: str | np.ndarray = "auto",
    params: Mapping[str, Any] | None = None,
    classes: Any = None,
    confidence: float = 0.95,
    rows_per_request: int = 1000,
    X_pool: np.ndarray | None = None,
    y_pool: np.ndarray | None = None,
    random_state: RandomState = None,
) -> AuditResult:
    """Lower-bound the epsilon of one answer of a served private predictor (see the module docstring).

    Parameters
    ----------
    method : {"prediction-sensitivity", "subsample-aggregate"} or callable
        A method of :mod:`privml.registry`, or a factory called with the
        settings ``epsilon``, ``delta``, ``budget``, ``accountant``,
        ``classes``, ``random_state`` (and ``params``) that returns an unfitted
        private predictor (e.g. a subclass, such as the negative controls of
        :mod:`privml.testing.prediction_controls`).
    X, y :
        The base records (features on the unit ball, as privml's loaders give them).
    epsilon_query : float
        The per-answer epsilon to claim and audit (> 0).
    queries : int
        ``N``: answers asked in each world (>= 4), and the budget of each
        world's ledger: answer ``N + 1`` must be refused.
    canary : {"clipbkd", "random", "record"} or Canary, default "clipbkd"
        See :mod:`privml.audit._canaries` (``"record"`` needs ``X_pool, y_pool``).
    canary_label : optional
        The canary's label (default: the last public class); the record it
        replaces takes the next class.
    query : {"auto", "canary"} or array, default "auto"
        Where to ask: ``"canary"`` the canary's point, ``"auto"`` the canary's
        point for prediction sensitivity and :func:`split_vote_query` for
        subsample-and-aggregate (the canary's point when none is found), or a
        feature vector.
    params : mapping, optional
        Further constructor settings (``l2``, ``loss``, ``n_models``, ...).
        Defaults of the audit: the Huber hinge for two-class prediction
        sensitivity, :data:`DEFAULT_TEACHERS` teachers for subsample-and-aggregate.
    classes : sequence, optional
        The public class set (default: the labels of ``y`` and the canary).
    confidence : float, default 0.95
    rows_per_request : int, default 1000
        Rows of each JSON request to the service.
    random_state :
        Seed of the whole audit (canary, training, each world's noise).

    Returns
    -------
    AuditResult
        ``claimed`` is the per-answer guarantee (``epsilon / B`` of the
        trained predictor, basic composition, its neighbouring relation);
        ``scores_out`` / ``scores_in`` hold one statistic per answer;
        ``details`` say what was asked and what the ledgers charged.

    Raises
    ------
    ValueError
        for bad settings, before anything is trained.
    """
    # long-function: a long numpy-style docstring; the code is checks, then build, train, ask and bound in sequence.
    factory, name, epsilon_query, queries, rows_per_request = check_audit_settings(
        method, epsilon_query=epsilon_query, queries=queries, params=params, confidence=confidence,
        rows_per_request=rows_per_request,
    )
    X = check_finite_array(X, "X", ndim=2)
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y has shape {y.shape}, expected ({X.shape[0]},)")
    point = _check_query(query, X.shape[1])
    public = _class_set(y, classes, canary_label)
    setup_seed, train_seed, out_seed, in_seed = (int(s.generate_state(1)[0]) for s in _root_seed(random_state).spawn(4))
    settings = {**_world_settings(name, len(public), params, epsilon_query, queries), "classes": public,
                "random_state": train_seed}
    models = [_build(factory, settings) for _ in range(2)]
    for model in models:
        model._check_hyperparameters()  # every setting checked before the data are touched
    relation = get_spec(models[0].method).neighbouring
    if relation is None:  # pragma: no cover - every private-prediction method states one
        raise ValueError(f"{models[0].method} states no neighbouring relation to audit")
    if isinstance(canary, str):
        canary = make_canary(canary, X, classes=public, label=canary_label, X_pool=X_pool, y_pool=y_pool,
                             random_state=setup_seed)
    for label in (canary.y, canary.replaced_y):
        if label not in public:
            raise ValueError(f"the canary's label {label!r} is not in the public class set {list(public)!r}")
    pair = neighbouring_pair(X, y, canary, relation)

    start = time.perf_counter()
    served = _train_and_open(models, pair, [out_seed, in_seed])
    claimed = [_per_answer_epsilon(p) for p in served]
    if not all(math.isclose(c, epsilon_query, rel_tol=1e-9) for c in claimed):
        raise ValueError(f"the predictor claims {claimed[0]} per answer, not epsilon_query={epsilon_query}: "
                         "the factory must honour the settings it is given")
    probabilities = models[0].method == "prediction-sensitivity"
    point, where = _query_point(point, query, canary, served, pair, probabilities)
    services = [PredictionService(p, limits=ServeLimits(max_rows=rows_per_request)) for p in served]
    answers = [_ask(s, point, queries, rows_per_request, probabilities) for s in services]
    after = [_after_budget(s, point, probabilities) for s in services]
    seconds = time.perf_counter() - start
    index = int(np.flatnonzero(np.asarray(served[1].classes_) == canary.y)[0])
    out, inn = (_scores(a, index, canary.y, probabilities) for a in answers)
    bound = epsilon_lower_bound(out, inn, delta=0.0, confidence=confidence)
    details = {
        "audit": "prediction-service",
        "method": models[0].method,
        "estimator": type(models[0]).__name__,
        "canary": canary.kind,
        "query": where,
        "statistic": "log-odds of the canary's class" if probabilities else "label is the canary's",
        "queries": queries,
        "epsilon_total": float(served[1].privacy_.epsilon),
        "ledger_budget": queries,
        "ledger_spent": [int(p.ledger_.state().spent) for p in served],
        "answer_after_budget": after,
        "n_train": int(pair.X_in.shape[0]),
        "n_features": int(X.shape[1]),
        **({} if probabilities else {"n_models": int(served[1].fit_info_["n_models"])}),
    }
    per_answer = PrivacyGuarantee(claimed[1], 0.0, relation, "basic: epsilon / budget per answer")
    return AuditResult(per_answer, bound, roc_auc(inn, out), out, inn, seconds, details)
