"""Subsample-and-aggregate: private labels by a noisy vote of models trained on disjoint parts.

Dwork and Feldman (2018, "Privacy-preserving prediction"); vdMH20 (van der
Maaten and Hannun 2020) App. C.2, Thm 7-8. The training set is split into
``m`` disjoint parts by a random permutation that depends on nothing but
``n``, ``m`` and the random state; one model ("teacher") is trained on each
part. A query ``x`` (public) is answered with a label ``c`` drawn with
probability proportional to ``exp(beta * votes_c(x))``, where ``votes_c(x)`` is
the number of teachers predicting ``c``.

Privacy of one answer, replace-one neighbours: the replaced record lies in
exactly one part, so at most one teacher changes its vote, moving one count
down by one and another up by one. Every count changes by at most 1
(sensitivity ``Delta_u = 1`` of the utility vector in L-infinity norm), and the
vote is the exponential mechanism (McSherry and Talwar 2007) at
``epsilon_q = 2 beta``: epsilon_q-DP (vdMH20 Thm 7) and epsilon_q-bounded range,
hence ``epsilon_q^2 / 8``-zCDP (Cesar and Rogers 2021, Lemma 3.2). The
exponential mechanism of :mod:`privml.mechanisms` at ``epsilon_q`` with
sensitivity 1 samples with exactly ``beta = epsilon_q / 2``: the reference code
of vdMH20 used ``beta = epsilon_q``, which is ``2 epsilon_q``-DP (one record moves two
counts; McSherry & Talwar 2007, Thm 6, with sensitivity 2 in the score difference).

Only labels are released. The selection probabilities (or the votes) are
deterministic functions of the private data and are not covered by the
guarantee, so :meth:`SubsampleAndAggregate.predict_proba` refuses.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import hashlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator, clone

from privml._params import keep_params
from privml._random import RandomState, check_random_state
from privml._validation import check_count, check_n_jobs
from privml.budget import charged_fit
from privml.data._labels import label_codes
from privml.guarantee import PrivacyGuarantee
from privml.ledger import BudgetLedger
from privml.linear._base import PrivateLinearClassifier
from privml.linear._nonprivate import NonPrivateClassifier
from privml.mechanisms._exponential import ExponentialMechanism
from privml.neighbouring import Neighbouring
from privml.prediction._base import BudgetedPredictor
from privml.prediction._calibration import VoteCalibration, calibrate_vote_epsilon
from privml.registry import estimator_class
from privml.release import strip_seeds

__all__ = ["TEACHER_TOL", "SubsampleAndAggregate", "random_partition", "sharing_votes"]

#: Gradient-norm tolerance of the default teachers. The vote's guarantee treats
#: teachers as black boxes (one record changes one teacher, so one vote, however
#: that teacher was trained: vdMH20 Section 3.3), so a teacher needs accuracy, not
#: the certified minimiser that output perturbation's sensitivity bound needs
#: (``NonPrivateClassifier``'s own 1e-10). Measured on MNIST (55,000 x 785, m = 8
#: and 64): the test predictions of 1e-6 teachers equal those of 1e-10 teachers
#: on every one of the 10,000 test images, at a third to half of the solver time.
TEACHER_TOL = 1e-6


def random_partition(n: int, n_parts: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Split ``range(n)`` into ``n_parts`` disjoint parts of sizes differing by at most one.

    Data-independent: the parts depend on ``n``, ``n_parts`` and ``rng`` only,
    so under replace-one neighbours (same n) the replaced record falls in
    exactly one part, the same one on both datasets.
    """
    n = check_count(n, "n")
    n_parts = check_count(n_parts, "n_models")
    if n_parts > n:
        raise ValueError(f"n_models={n_parts} exceeds the number of training records ({n})")
    return np.array_split(rng.permutation(n), n_parts)


def _teacher_record(teachers: list[Any]) -> dict[str, Any]:
    """How to rebuild the teachers from stacked weights, when they are privml linear models of one class."""
    kinds = {type(t) for t in teachers}
    if len(kinds) != 1 or not issubclass(next(iter(kinds)), PrivateLinearClassifier):
        return {}
    teacher = teachers[0]
    params = {
        # A live generator is not a setting that can be stored, and a seed would let the
        # teachers' noise be replayed (privml.release); the weights are what matter.
        k: (None if isinstance(v, np.random.Generator | np.random.SeedSequence) else v)
        for k, v in strip_seeds(teacher.get_params(deep=False)).items()
    }
    return {"teacher_method": teacher.method, "teacher_params": params, "teacher_privacy": teacher.privacy_.to_dict()}


def _fit_teacher(estimator: Any, X: np.ndarray, y: np.ndarray) -> Any:
    return estimator.fit(X, y)


#: Rows of each public probe at most (a teacher's fit on a part of thousands of rows costs as much as a teacher).
PROBE_ROWS = 1000


def check_teacher_takes_one_class(estimator: Any, classes: np.ndarray, n_features: int, part_size: int) -> None:
    """Refuse, from public inputs only, a teacher that cannot fit a part whose labels are all one class.

    A part may hold one class only, and whether it does depends on the
    private labels: a teacher that then raised (scikit-learn's
    ``LogisticRegression``) would make ``fit`` succeed on a dataset and fail
    on its neighbour, naming the class (a review). Each probe is a fixed
    public array (seeded uniform features in [-1, 1], up to :data:`PROBE_ROWS` rows of
    the smallest part's size; n and m are public): first with every class,
    then once per class alone. NumPy's global random state is restored, so
    unseeded teachers draw as they would without the probe. privml's own
    classifiers given the public class set fit any part and are not probed
    (a CNN teacher's probe would cost a teacher's training).
    """
    if type(estimator).__module__.startswith("privml.") and estimator.get_params(deep=False).get("classes") is not None:
        return
    rows = max(len(classes), min(part_size, PROBE_ROWS))
    X = np.random.default_rng(0).uniform(-1.0, 1.0, size=(rows, n_features))  # public, varied: no privacy noise
    state = np.random.get_state()
    try:
        _probe(estimator, X, np.resize(classes, rows), "a public probe holding every class")
        for label in classes:
            shown = label.item() if isinstance(label, np.generic) else label  # 1, not np.int64(1)
            _probe(estimator, X, np.full(rows, label, dtype=classes.dtype),
                   f"a part holding class {shown!r} alone, which a part may, depending on the private labels")
    finally:
        np.random.set_state(state)


def _probe(estimator: Any, X: np.ndarray, y: np.ndarray, what: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the probe's own warnings (e.g. convergence) say nothing of the data
            clone(estimator).fit(X, y)
    except Exception as exc:  # noqa: BLE001 - any refusal of the probe is the teacher's, said in one line
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise ValueError(
            f"the teacher estimator {type(estimator).__name__} cannot fit {what} ({reason}); its failure on a part "
            "would depend on the data: use a teacher that can (e.g. privml's NonPrivateClassifier with classes=...)"
        ) from None


def _plain_linear(teacher: Any) -> bool:
    """Whether ``teacher`` predicts as every privml linear classifier does (argmax of projected rows times weights)."""
    kind = type(teacher)
    return (isinstance(teacher, PrivateLinearClassifier) and hasattr(teacher, "weights_")
            and kind.predict is PrivateLinearClassifier.predict
            and kind.decision_function is PrivateLinearClassifier.decision_function
            and kind._validate_X is PrivateLinearClassifier._validate_X)


_VOTE_MEMO: contextvars.ContextVar[collections.OrderedDict[str, np.ndarray] | None] = contextvars.ContextVar(
    "privml_vote_memo", default=None)
#: Vote arrays a memo keeps (least recently used go first).
_VOTE_MEMO_SIZE = 64


@contextlib.contextmanager
def sharing_votes(memo: collections.OrderedDict[str, np.ndarray] | None) -> Iterator[None]:
    """Reuse vote counts of identical teachers on identical rows inside the block (None: no sharing).

    The counts are a non-private function of the training data: ``memo``
    must stay in memory, with the same protection as the teachers. The
    trade-off study keeps one per worker (:mod:`privml.study._cache`). Only
    the counts are shared; every answer still draws its own noise.
    """
    token = _VOTE_MEMO.set(memo)
    try:
        yield
    finally:
        _VOTE_MEMO.reset(token)


def _votes_key(teachers: list[Any], classes: np.ndarray, X: Any) -> str | None:
    """Content hash of (teachers' weights, class set, rows); None when the teachers are not plain linear models."""
    if not teachers or not all(_plain_linear(t) for t in teachers):
        return None
    digest = hashlib.sha256(f"privml-votes-v1|{classes.tolist()!r}".encode())
    for teacher in teachers:
        weights = np.ascontiguousarray(teacher.weights_)
        digest.update(f"|{type(teacher).__name__}:{teacher.classes_.tolist()!r}:{weights.shape}|".encode())
        digest.update(weights.data.cast("B"))  # .data is memoryview(weights), typed for Python < 3.12
    rows = np.ascontiguousarray(X)
    digest.update(f"|X:{rows.dtype.str}:{rows.shape}|".encode())
    digest.update(rows.data.cast("B"))
    return digest.hexdigest()


class SubsampleAndAggregate(BudgetedPredictor):
    """Private labels from a noisy majority vote of ``n_models`` teachers, for a budget of queries.

    Parameters
    ----------
    estimator : scikit-learn classifier, optional
        Cloned once per part. Default: :class:`~privml.linear.NonPrivateClassifier`
        with the public ``classes`` and ``tol=TEACHER_TOL`` (1e-6: a teacher
        needs accuracy, not a certified minimiser). An estimator with a ``classes`` parameter
        left at None gets the public class set. Any classifier that can fit
        a part holding a single class works (the guarantee treats teachers as
        black boxes; one that cannot is refused before the data are
        partitioned, since whether a part holds one class depends on the
        private labels); only privml linear models can be saved to a model file.
    n_models : int
        m, the number of disjoint parts and teachers (1 <= m <= n).
    epsilon : float
        Total privacy parameter over all ``budget`` answers, > 0.
    delta : float, default 0
        0: basic composition. In (0, 1): advanced composition or zCDP.
    budget : int
        B, the number of answers ever released; answer B + 1 is refused.
    classes : sequence, optional
        The **public** class set (the candidates of the vote); inferred from
        ``y`` with a :class:`~privml.exceptions.PrivacyLeakWarning` if omitted.
    accountant : {"auto", "basic", "advanced", "zcdp"}, default "auto"
        Composition used for the per-query epsilon
        (:func:`~privml.prediction.calibrate_vote_epsilon`);
        ``"auto"`` takes the largest.
    ledger : BudgetLedger, optional
        Where answers are counted (budget must equal ``budget``); default a
        fresh :class:`~privml.ledger.MemoryLedger` at fit.
    n_jobs : int, optional
        Teachers trained in parallel by joblib: a positive count or -1 (every core); None: one process.
    random_state : None, int or numpy Generator, optional
        Drives the partition and the votes; None draws OS entropy.

    Attributes
    ----------
    classes_, n_features_in_ :
        As for scikit-learn classifiers.
    teachers_ : list
        The fitted teachers (non-private; never release them).
    calibration_ : VoteCalibration
        Per-query epsilon and ``beta``.
    ledger_, privacy_ :
        The answer count and the total (epsilon, delta) over ``budget`` answers, replace-one.
    fit_info_ : dict
        ``n_models``, ``part_sizes`` (min, max), ``accountant``,
        ``epsilon_query``, ``beta``, ``epsilon_queries`` (every applicable
        accounting's, for comparison), ``budget``.

    Notes
    -----
    Neighbouring relation: **replace-one**. Sensitivity: each vote count
    changes by at most 1 (one teacher changes its vote). Theorems: vdMH20
    Thm 7 (each answer ``2 beta``-DP; Dwork and Feldman 2018), Thm 8
    (advanced composition; Dwork, Rothblum and Vadhan 2010), and for
    ``"zcdp"`` bounded range (Cesar and Rogers 2021, Lemma 3.2) with zCDP
    composition (Bun and Steinke 2016). Each answer charges the ledger before
    the vote is computed.

    Examples
    --------
    >>> from privml.data import load_dataset
    >>> data = load_dataset("breast_cancer", random_state=0)
    >>> model = SubsampleAndAggregate(n_models=10, epsilon=1.0, budget=20, classes=[0, 1], random_state=0)
    >>> model = model.fit(data.X_train, data.y_train)
    >>> model.predict(data.X_test[:5]).shape, model.remaining()
    ((5,), 15)
    """

    method = "subsample-aggregate"
    released_info = frozenset({"n_models", "part_sizes", "accountant", "budget", "epsilon_query", "beta",
                               "epsilon_queries", "teacher_method", "teacher_params", "teacher_privacy"})

    def __init__(
        self,
        *,
        estimator: Any = None,
        n_models: int,
        epsilon: float,
        delta: float = 0.0,
        budget: int,
        classes: Any = None,
        accountant: str = "auto",
        ledger: BudgetLedger | None = None,
        n_jobs: int | None = None,
        random_state: RandomState = None,
    ) -> None:
        keep_params(self, locals())

    # ------------------------------------------------------------ validation
    def _check_hyperparameters(self) -> VoteCalibration:
        """Validate every setting and calibrate the per-query epsilon (no data involved)."""
        epsilon, delta, budget = self._check_privacy_settings()
        check_count(self.n_models, "n_models")
        if self.n_jobs is not None:
            # Checked here, before the partition is drawn: joblib would refuse 0 or 'x' only after it.
            check_n_jobs(self.n_jobs)
        if self.estimator is not None and not isinstance(self.estimator, BaseEstimator):
            raise TypeError(f"estimator must be a scikit-learn estimator, got {type(self.estimator).__name__}")
        return calibrate_vote_epsilon(epsilon, delta, budget, self.accountant)

    def _base_estimator(self, classes: np.ndarray) -> BaseEstimator:
        """The estimator each teacher is cloned from, told the public class set where it can be."""
        public = tuple(c.item() if hasattr(c, "item") else c for c in classes)
        if self.estimator is None:
            return NonPrivateClassifier(classes=public, tol=TEACHER_TOL)
        base = clone(self.estimator)
        if "classes" in base.get_params(deep=False) and base.get_params(deep=False)["classes"] is None:
            base.set_params(classes=public)
        return base

    # ------------------------------------------------------------------- fit
    def fit(self, X: Any, y: Any) -> SubsampleAndAggregate:
        """Partition (X, y) at random, train one teacher per part (in parallel), fix the vote.

        Nothing is released by fitting; all settings are validated first.
        """
        self._check_refit()
        calibration = self._check_hyperparameters()
        X, y, classes = self._fit_data(X, y)
        rng = check_random_state(self.random_state)
        base = self._base_estimator(classes)
        if self.n_models > X.shape[0]:  # before the probe, whose parts would hold no record
            raise ValueError(f"n_models={self.n_models} exceeds the number of training records ({X.shape[0]})")
        check_teacher_takes_one_class(base, classes, X.shape[1], X.shape[0] // self.n_models)
        # Under an active privml.budget.BudgetAccountant the guarantee over the whole answer budget is charged now
        # (the teachers' own fits inside are not releases, and are not charged again).
        with charged_fit(self, lambda: self._planned_guarantee()):
            parts = random_partition(X.shape[0], self.n_models, rng)
            try:
                teachers = Parallel(n_jobs=self.n_jobs)(
                    delayed(_fit_teacher)(clone(base), X[part], y[part]) for part in parts
                )
            except Exception as exc:  # noqa: BLE001 - said without its message, which may name a class or a value
                if type(base).__module__.startswith("privml."):
                    raise  # privml's own messages name settings and sizes only (n and m are public)
                raise ValueError(
                    f"a teacher ({type(base).__name__}) failed to fit its part ({type(exc).__name__}); whether one "
                    "does may depend on the private records, so its message is not shown: use a teacher that fits any "
                    "part (e.g. privml's NonPrivateClassifier with classes=...)"
                ) from None
            sizes = [part.size for part in parts]
            self._set_teachers(list(teachers), classes, X.shape[1], calibration, rng,
                               part_sizes=(min(sizes), max(sizes)))
        return self

    def _set_teachers(
        self,
        teachers: list[Any],
        classes: np.ndarray,
        n_features: int,
        calibration: VoteCalibration,
        rng: np.random.Generator,
        *,
        part_sizes: tuple[int, int] | None,
    ) -> None:
        self.teachers_ = teachers
        self.classes_ = np.asarray(classes)
        self.n_features_in_ = int(n_features)
        self.calibration_ = calibration
        self._vote_mechanism = self._mechanism(calibration.epsilon_query, rng)
        self.fit_info_ = {
            "n_models": len(teachers),
            "part_sizes": list(part_sizes) if part_sizes is not None else None,
            "accountant": calibration.accountant,
            "budget": calibration.budget,
            "epsilon_query": calibration.epsilon_query,
            "beta": self._vote_mechanism.temperature,
            "epsilon_queries": dict(calibration.candidates),
            **_teacher_record(teachers),
        }
        self.privacy_ = PrivacyGuarantee(
            calibration.epsilon, calibration.delta, Neighbouring.REPLACE_ONE, calibration.accountant
        )
        self._attach_ledger(self.ledger)

    def _mechanism(self, epsilon_query: float, rng: np.random.Generator) -> ExponentialMechanism:
        """The per-query vote: exponential mechanism at epsilon_q over counts of sensitivity 1.

        Its temperature is ``epsilon_q / (2 * 1) = beta``: the counts are not
        monotone under replace-one (one goes down, another up), so the
        sharper ``monotonic`` variant does not apply.
        """
        return ExponentialMechanism(
            epsilon=epsilon_query, sensitivity=1.0, neighbouring=Neighbouring.REPLACE_ONE, random_state=rng
        )

    # --------------------------------------------------------------- answers
    def _votes(self, X: np.ndarray) -> np.ndarray:
        """Vote counts, shape (n, k). Not private: only ever fed to the mechanism.

        Inside :func:`sharing_votes` (the trade-off study, where every
        setting of B and epsilon of a repeat asks the same teachers about the
        same records) counts already computed for the same teachers and rows
        are reused: looked up by a content hash of the teachers' weights and
        the rows, so only identical inputs share.
        """
        memo = _VOTE_MEMO.get()
        key = _votes_key(self.teachers_, self.classes_, X) if memo is not None else None
        if memo is None or key is None:
            return self._count_votes(X)
        if key in memo:
            memo.move_to_end(key)
            return memo[key].copy()
        votes = self._count_votes(X)
        memo[key] = votes.copy()
        while len(memo) > _VOTE_MEMO_SIZE:
            memo.popitem(last=False)
        return votes

    def _count_votes(self, X: np.ndarray) -> np.ndarray:
        votes = np.zeros((X.shape[0], self.classes_.size), dtype=np.int64)
        rows = np.arange(X.shape[0])
        projected = None
        for teacher in self.teachers_:
            if _plain_linear(teacher) and np.array_equal(teacher.classes_, self.classes_):
                # What teacher.predict computes, with the rows checked and projected once for all
                # teachers instead of once per teacher (the same bits: the projection is per row).
                if projected is None:
                    projected = teacher._validate_X(X, fitted=True)
                scores = projected @ teacher.weights_
                index = (scores > 0).astype(np.int64) if scores.ndim == 1 else np.argmax(scores, axis=1)
            else:
                index = label_codes(teacher.predict(X), self.classes_, what="a teacher's predictions")
            # One vote per row per teacher, so the fancy-indexed increment has no repeated index.
            votes[rows, index] += 1
        return votes

    def predict(self, X: Any, *, key: str | None = None) -> np.ndarray:
        """Private labels, one answer per row, each drawn with probability proportional to exp(beta votes).

        Charges ``len(X)`` answers to the ledger first (all or nothing:
        :class:`~privml.exceptions.BudgetExhausted` and nothing computed
        when they do not fit); ``key`` charges an API key's quota too.
        """
        X = self._spend(X, key)
        # One vectorised draw: the same Gumbel variates, row after row, as selecting row by row.
        return self.classes_[self._vote_mechanism.select_rows(self._votes(X))]

    def predict_proba(self, X: Any, *, key: str | None = None) -> np.ndarray:
        """Refused: subsample-and-aggregate releases labels only.

        The vote distribution softmax(beta votes) is a deterministic function
        of the private votes, not covered by the guarantee. Nothing is
        charged. Use :meth:`predict`.

        Raises
        ------
        NotImplementedError
            always.
        """
        raise NotImplementedError(
            "subsample-and-aggregate releases labels only: its vote probabilities are not private; use predict"
        )

    # ------------------------------------------------------------ model file
    def _file_params(self) -> dict[str, Any]:
        """Constructor settings for a model file; the teachers are stored as arrays instead of ``estimator``."""
        params = super()._file_params()
        params["estimator"] = None
        params["n_jobs"] = None
        return params

    def _model_arrays(self) -> dict[str, np.ndarray]:
        """Stacked teacher weights; only privml linear teachers of one class can be stored without pickle."""
        self._check_fitted()
        if "teacher_method" not in self.fit_info_:
            kinds = sorted({type(t).__name__ for t in self.teachers_})
            raise ValueError(
                "only subsample-and-aggregate models whose teachers are privml linear classifiers of one class can "
                f"be saved (they are stored as weight arrays, never pickled); these teachers are {', '.join(kinds)}"
            )
        return {"teacher_weights": np.stack([t.weights_ for t in self.teachers_]), "classes": self.classes_}

    def _restore_arrays(self, arrays: dict[str, np.ndarray], metadata: dict) -> None:
        info = metadata["fit_info"]
        teacher_class = estimator_class(info["teacher_method"])
        classes = np.asarray(arrays["classes"])
        teachers = []
        for weights in np.asarray(arrays["teacher_weights"], dtype=np.float64):
            teacher = teacher_class(**strip_seeds(info["teacher_params"]))
            teacher._restore_arrays(
                {"weights": weights, "classes": classes},
                {"privacy": info["teacher_privacy"], "fit_info": {}},
            )
            teachers.append(teacher)
        part_sizes = info.get("part_sizes")
        self._set_teachers(
            teachers,
            classes,
            teachers[0].n_features_in_,
            self._check_hyperparameters(),
            check_random_state(self.random_state),
            part_sizes=tuple(part_sizes) if part_sizes else None,
        )
