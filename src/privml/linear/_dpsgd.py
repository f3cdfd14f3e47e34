"""DP-SGD for linear (logistic) and softmax models, in numpy.

Three *designs* of differentially private mini-batch gradient descent, from
the seed lecture (Chaudhuri, "Differentially private machine learning",
Section 2) to the state of the art, so that a study can measure what each
improvement buys. All three clip the **whole** per-example gradient (the
weights of every class together, one L2 norm) to ``clip_norm`` C and add
noise to the clipped sum; they differ in how batches are formed and how the
steps are accounted for:

============  ===============================  ================  ==========================================
design        batches                          neighbouring      accounting
============  ===============================  ================  ==========================================
``direct``    one pass, disjoint fixed-size    replace-one       each step (eps, delta)-DP by itself;
              batches of a random partition                      parallel composition (Sec. 2.1)
``linear``    Poisson sample at rate q, T      add/remove-one    each step (eps_0, delta_0)-DP, amplified by
              steps                                              subsampling, composed linearly (Thm 3, 2.2)
``poisson``   Poisson sample at rate q, T      add/remove-one    DP-SGD (Abadi et al. 2016; Sec. 2.3),
(default)     steps (or a fixed-size batch)    or replace-one    :func:`privml.accounting.plan_dpsgd`
============  ===============================  ================  ==========================================

Per-example gradients are never materialised. For a linear model with
scores ``s_i = W^T x_i`` the gradient of ``loss(s_i, y_i)`` is the outer
product ``g_i = x_i r_i^T`` with ``r_i = d loss / d s_i`` (a scalar for the
binary logistic loss, a k-vector ``p_i - e_{y_i}`` for the softmax), so its
Frobenius norm factorises, ``||g_i|| = ||x_i|| ||r_i||`` (the "ghost norm"
trick of Goodfellow 2015 and Li et al. 2022, exact for one linear layer), and
the clipped sum is one matrix product ``X_B^T (c_B * R_B)`` with the clip
factors ``c_i = min(1, C / ||g_i||)``: O(b d k) per step, like a non-private
step.

Clipping is kept even where it cannot bind: with ``||x|| <= 1`` the logistic
gradient has norm below 1 and the softmax gradient below sqrt(2)
(:attr:`privml.losses.Loss.lipschitz`), so ``C >= L`` never changes a
gradient. The guarantee rests on the clip, not on the loss: the clip is what
holds if the loss, the projection or floating point ever let a larger
gradient through. The default ``C = 0.1`` sits well below L on purpose:
at the start of training on MNIST every per-example gradient is longer than
0.1 (median norm 0.95 at W = 0), and after training about a fifth still are,
so the clip binds where the gradients are large and the noise ``s C`` is a
tenth of what the worst case would need (the usual bias-variance trade of
clipping; see :class:`DPSGDClassifier` for the tuning).

The step's pieces (samplers, clipped sum, schedules, averaging) live in
:mod:`privml.linear._dpsgd_steps`, the older designs' noise in
:mod:`privml.linear._dpsgd_noise`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import numpy as np

from privml._params import keep_params
from privml._progress import progress_bar
from privml._random import RandomState
from privml._validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_planned_steps,
    check_positive,
    check_positive_delta,
    check_probability,
)
from privml.accounting._dpsgd import (
    DPSGD_ACCOUNTANTS,
    REPLACE_ONE_BOUNDS,
    SAMPLINGS,
    check_dpsgd_options,
    plan_dpsgd,
    planned_steps,
)
from privml.guarantee import PrivacyGuarantee
from privml.linear._base import PrivateLinearClassifier, make_loss
from privml.linear._batch_rows import BatchRows
from privml.linear._dpsgd_noise import _check_budget, _direct_noise, _linear_noise, _Noise, _Plan
from privml.linear._dpsgd_steps import (
    LR_SCHEDULES,
    _Averager,
    check_averaging,
    clipped_gradient_sum,
    fixed_size_sample,
    learning_rate_schedule,
    poisson_sample,
)
from privml.losses import Loss
from privml.mechanisms import sample_noise
from privml.neighbouring import Neighbouring

__all__ = [
    "AVERAGING",
    "DESIGNS",
    "DPSGDClassifier",
]

Design = Literal["poisson", "direct", "linear"]
Schedule = Literal["constant", "cosine", "step", "inverse_sqrt"]
Averaging = Literal["none", "uniform", "tail", "ema"]

#: Training designs, from the seed lecture's first to the standard one.
DESIGNS: tuple[str, ...] = ("poisson", "direct", "linear")
#: Iterate averaging accepted by ``averaging``.
AVERAGING: tuple[str, ...] = ("none", "uniform", "tail", "ema")

#: Default expected batch size (see :class:`DPSGDClassifier` for how it was chosen).
DEFAULT_BATCH_SIZE = 4096
#: Default number of epochs of the ``poisson`` and ``linear`` designs.
DEFAULT_EPOCHS = 30.0


# ----------------------------------------------------------------- estimator
def _at_most_one(**settings: tuple[Any, Callable[[Any, str], Any]]) -> None:
    """Two alternative settings: at most one given, and that one checked (``check(value, name)``)."""
    given = [name for name, (value, _) in settings.items() if value is not None]
    if len(given) > 1:
        raise ValueError(f"give {' or '.join(settings)}, not both")
    for name in given:
        settings[name][1](settings[name][0], name)


class DPSGDClassifier(PrivateLinearClassifier):
    """Differentially private SGD for a logistic (binary) or softmax (k-class) linear model.

    Minimises ``(l2/2) ||W||^2 + (1/n) sum_i loss(W; x_i, y_i)`` with noisy
    clipped mini-batch gradients. The default is DP-SGD as in Abadi et al.
    (2016): Poisson sampling, whole-gradient clipping, Gaussian noise,
    normalisation by the expected batch size and a PLD accountant.
    Hyper-parameters are keyword-only, stored as given, and validated in
    :meth:`fit` before any noise is drawn.

    Parameters
    ----------
    epsilon:
        Privacy budget, > 0. With ``noise_multiplier=None`` the noise is
        calibrated to it; otherwise it is a cap, and a fit whose noise would
        cost more is refused.
    delta:
        Privacy budget delta in [0, 1). The ``poisson`` design needs
        delta > 0; ``direct`` and ``linear`` with delta = 0 use L2-Laplace
        noise (pure DP).
    noise_multiplier:
        Noise on the clipped gradient sum, in units of ``clip_norm``: the
        standard deviation is ``noise_multiplier * clip_norm`` per coordinate
        (Gaussian), or the L2-Laplace scale is ``noise_multiplier *
        clip_norm``. None (default): the smallest value meeting
        ``(epsilon, delta)``.
    clip_norm:
        C > 0, the bound on the L2 norm of each per-example gradient (all
        classes together). Default 0.1 (tuned on a validation split of MNIST;
        see the module notes for why it is below the Lipschitz constant).
    sample_rate, batch_size:
        At most one. ``sample_rate`` is the Poisson rate q; ``batch_size`` is
        the expected batch size b, giving q = b / n. Default: b = 4096, or
        full batches (q = 1) when n <= 4096. For ``direct``, batches have
        size ``batch_size`` (or ``round(q n)``), the last ones one larger when
        n is not a multiple.
    epochs, steps:
        At most one; the number of steps is ``round(epochs / q)``. Default:
        30 epochs. The ``direct`` design always makes one pass (n // b steps)
        and accepts only ``epochs=1`` or nothing.
    learning_rate:
        Base step size eta > 0. The default 1000 looks large because the
        clipped mean gradient has norm at most C = 0.1 and records lie in the
        unit ball: an MNIST image of norm 1 spreads over 785 coordinates, and
        a good softmax model has weights of norm in the hundreds. What
        matters is ``learning_rate * clip_norm`` (100 by default); keep it
        when changing ``clip_norm``.
    lr_schedule:
        ``"constant"``, ``"cosine"`` (default), ``"step"`` or ``"inverse_sqrt"``
        (see :func:`~privml.linear._dpsgd_steps.learning_rate_schedule`).
    l2:
        L2 regularisation lambda >= 0. Its gradient ``lambda W`` is added
        outside the clipped sum: it does not depend on the data, so it has
        no sensitivity and must not be clipped with the data terms.
    averaging:
        Released weights: ``"none"`` (last iterate), ``"uniform"`` (mean of
        all iterates), ``"tail"`` (default; mean of the last ``tail_fraction``
        of the iterates) or ``"ema"`` (exponential moving average with
        ``ema_decay``). Averaging is post-processing: no privacy cost.
    tail_fraction:
        In (0, 1]; fraction of iterates averaged by ``"tail"`` (default 0.5).
    ema_decay:
        In [0, 1); decay of ``"ema"`` (default 0.99).
    accountant:
        ``"pld"`` (default, tightest) or ``"rdp"``; used by the ``poisson``
        design. ``linear`` is accounted by basic composition and ``direct``
        by one Gaussian (GDP) or one L2-Laplace (basic) step, whatever this
        says; ``fit_info_["accountant"]`` reports the one used.
    design:
        ``"poisson"`` (default), ``"direct"`` or ``"linear"``; see the module
        docstring and the Notes.
    neighbouring:
        The relation of the guarantee. None (default): the design's own,
        add/remove-one (zero-out view, n public) for ``poisson`` and
        ``linear``, replace-one for ``direct``. ``"replace-one"`` with the
        ``poisson`` design: same n, one record replaced by any other; the
        clipped sum then moves by up to 2C (a gradient can flip from +C to
        -C), only when the record is sampled, and the step is accounted by
        the tight replace-one dominating pair (PLD or RDP) or, with
        ``replace_one_bound="group"``, by group privacy. ``linear`` has no
        replace-one analysis and ``direct`` no add/remove-one one: asking for
        them raises ``ValueError``.
    sampling:
        Batches of the ``poisson`` design: None or ``"poisson"`` (default;
        independent coins at rate q, divided by the expected size q n) or
        ``"fixed-size"`` (exactly b = ``batch_size`` (or round(q n)) records
        drawn without replacement each step, divided by b; replace-one only,
        accounted by RDP (Wang, Balle and Kasiviswanathan 2019): use
        ``accountant="rdp"``).
    replace_one_bound:
        ``"tight"`` (default) or ``"group"``: how a replace-one guarantee of
        the Poisson-sampled ``poisson`` design is derived (the dominating
        pair, or (2 eps, (1 + e^eps) delta) from the add/remove-one one).
        Ignored under add/remove-one.
    classes:
        The public class set. None: taken from ``y`` with a
        :class:`~privml.exceptions.PrivacyLeakWarning`.
    random_state:
        None (OS entropy; use it for real releases), an int seed, or a numpy
        Generator.
    progress:
        Show a tqdm progress bar on stderr (tqdm is optional: an ImportError
        is raised before training if it is missing).

    Attributes
    ----------
    weights_, coef_, classes_, n_features_in_:
        As in :class:`~privml.linear.PrivateLinearClassifier`.
    privacy_:
        The :class:`~privml.PrivacyGuarantee`: ``(epsilon spent, delta)``
        under add/remove-one (``poisson``, ``linear``) or replace-one
        (``direct``, or ``neighbouring="replace-one"``) neighbours, with the
        accountant's name (``"pld+group"`` etc. for group privacy).
    privacy_event_:
        The :class:`~privml.accounting.DpEvent` that was accounted for; compose
        it with another accountant to compare bounds.
    fit_info_:
        Data-independent facts about the run: design, sampling, noise kind and
        multiplier, noise standard deviation on the clipped sum, sensitivity
        (per record, under add/remove; twice it under replace-one), steps,
        sample rate, expected batch size, epochs, accountant, the replace-one
        bound,
        epsilon spent, delta (and per-step epsilon/delta for ``linear``).
        Nothing computed from the private records is reported (no losses,
        clipping rates or realised batch sizes: each would leak).

    Notes
    -----
    ``poisson`` (Abadi et al. 2016, Algorithm 1; accounted by the sampled
    Gaussian mechanism of Mironov, Talwar and Zhang 2019): at each of T
    steps, sample each record independently with probability q, clip every
    per-example gradient to C, add N(0, s^2 C^2 I) to the sum, divide by the
    *expected* batch size q n, add ``l2 W`` and step. The clipped sum has
    sensitivity C under add/remove-one. Dividing by the realised batch size
    ``|B|`` instead would release it along with the noisy sum; ``|B|`` grows by one
    exactly when the added record is sampled, which the sampled-Gaussian
    analysis does not cover. The dataset size n is treated as public, as in
    Abadi et al. and the DP-SGD libraries: it fixes q (when ``batch_size``
    is given) and the divisor q n. The guarantee is then exactly the
    add/remove-one guarantee of the mechanism with those constants fixed
    (equivalently, the "zero-out" relation of Kairouz et al. 2021, where a
    record is replaced by one with zero gradient and n does not change).

    ``poisson`` with ``neighbouring="replace-one"``: the same steps, stated
    for neighbours of the same size that differ in one record. A replaced
    record changes the clipped sum by up to 2C, and only in steps that sample
    it; with Poisson sampling the step is dominated by
    (1-q) N(0, s^2) + q N(1, s^2) vs (1-q) N(0, s^2) + q N(-1, s^2) (proof and
    citations in :class:`privml.accounting._pld._ReplaceOnePoissonGaussianPair`);
    ``replace_one_bound="group"`` uses (2 eps, (1 + e^eps) delta) from the
    add/remove-one guarantee instead (group privacy; looser). With
    ``sampling="fixed-size"`` every step uses exactly b records drawn without
    replacement and divides by b (public), accounted by the RDP bound of
    Wang, Balle and Kasiviswanathan 2019, Theorem 9 (with its Gaussian
    refinement); that bound is about four times the exact chi^2 term, so at
    equal epsilon it needs more noise than Poisson sampling.

    ``direct`` (seed lecture Sec. 2.1; Song, Chaudhuri and Sarwate 2013): one
    pass over a random partition into disjoint batches, each step's noise
    calibrated to (epsilon, delta) by itself (sensitivity 2C of the sum under
    replace-one); parallel composition gives (epsilon, delta) for the run.

    ``linear`` (seed lecture Sec. 2.2, Theorem 3; Bassily, Smith and
    Thakurta 2014): Poisson-sampled steps as in ``poisson``, each
    (eps_0, delta_0)-DP on its sample, amplified by subsampling and composed
    by basic composition.

    The noise uses numpy's floating-point samplers (see
    :mod:`privml.mechanisms` for the Mironov 2012 caveat); the weights are
    post-processed noisy sums, never published bit-exact noise.

    Defaults (expected batch 4096, 30 epochs, C = 0.1, learning rate 1000,
    cosine schedule, averaging of the last half of the iterates) were chosen
    on MNIST (784 pixels and a bias feature, 10 classes) at epsilon = 1,
    delta = 1e-5, by accuracy on 10000 records held out of the training set
    (the test set was not used). Validation accuracy was flat, within about
    half a point of 90.5%, for batches of 2048 to 8192, 15 to 60 epochs and
    C from 0.03 to 1 with ``learning_rate * clip_norm`` near 100; it fell to
    68% at a learning rate of 2. With the whole training set, the MNIST test
    accuracy over three seeds was 81.0% at epsilon = 0.1, 89.0% at 0.3,
    91.2% at 1, 91.6% at 3 and 91.6% at 10 (non-private: about 92.5%).

    Examples
    --------
    >>> from privml.data import load_dataset
    >>> data = load_dataset("digits", bias=True, random_state=0)
    >>> model = DPSGDClassifier(epsilon=1.0, classes=range(10), random_state=0)
    >>> model = model.fit(data.X_train, data.y_train)
    >>> model.privacy_.epsilon <= 1.0, model.fit_info_["design"]
    (True, 'poisson')
    """

    method = "dpsgd"
    released_info = frozenset({
        "design", "noise", "noise_multiplier", "noise_std", "noise_scale", "clip_norm", "sensitivity",
        "neighbouring", "steps", "sample_rate", "expected_batch_size", "epochs", "accountant", "step_epsilon",
        "step_delta", "epsilon", "delta", "event", "sampling", "bound",
    })
    #: Audit-only seam (:mod:`privml.audit._one_run_dpsgd`): ``(batch indices, noisy clipped sum) -> sum``, called
    #: once a step before the sum is used (adds gradient canaries, reads the released sum). Production: None.
    _audit_step: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float = 1e-5,
        noise_multiplier: float | None = None,
        clip_norm: float = 0.1,
        sample_rate: float | None = None,
        batch_size: int | None = None,
        epochs: float | None = None,
        steps: int | None = None,
        learning_rate: float = 1000.0,
        lr_schedule: Schedule = "cosine",
        l2: float = 0.0,
        averaging: Averaging = "tail",
        tail_fraction: float = 0.5,
        ema_decay: float = 0.99,
        accountant: str = "pld",
        design: Design = "poisson",
        neighbouring: str | None = None,
        sampling: str | None = None,
        replace_one_bound: str = "tight",
        classes: Any = None,
        random_state: RandomState = None,
        progress: bool = False,
    ) -> None:
        keep_params(self, locals())

    @property
    def requires_delta(self) -> bool:  # type: ignore[override]
        """Only the ``poisson`` design needs delta > 0 (its noise is Gaussian)."""
        return self.design == "poisson"

    # ------------------------------------------------------------ validation
    def _check_hyperparameters(self) -> None:
        """Checks that need no data; run by :meth:`fit` before anything else."""
        if self.design not in DESIGNS:
            raise ValueError(f"design must be one of {', '.join(DESIGNS)}, got {self.design!r}")
        if self.accountant not in DPSGD_ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {', '.join(DPSGD_ACCOUNTANTS)}, got {self.accountant!r}")
        self._check_relation()
        check_epsilon(self.epsilon)
        delta = check_delta(self.delta)
        if self.design == "poisson":
            check_positive_delta(delta)
        if self.noise_multiplier is not None:
            check_positive(self.noise_multiplier, "noise_multiplier")
        check_positive(self.clip_norm, "clip_norm")
        _at_most_one(sample_rate=(self.sample_rate, check_probability), batch_size=(self.batch_size, check_count))
        _at_most_one(epochs=(self.epochs, check_positive), steps=(self.steps, check_count))
        # At least the epochs (q <= 1), checked before the data give q.
        check_planned_steps(self.steps or 1 if self.epochs is None else self.epochs, self.epochs)
        if self.design == "direct" and (self.steps is not None or self.epochs not in (None, 1)):
            raise ValueError(
                "the direct design makes exactly one pass over disjoint batches (n // batch_size steps): "
                f"leave epochs and steps unset, got epochs={self.epochs!r}, steps={self.steps!r}"
            )
        check_positive(self.learning_rate, "learning_rate")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        self._check_l2()
        check_averaging(self.averaging, self.tail_fraction, self.ema_decay, AVERAGING)  # refuses ignored settings
        if not isinstance(self.progress, bool):
            raise TypeError(f"progress must be a bool, got {type(self.progress).__name__}")

    def _check_l2(self) -> float:
        return check_positive(self.l2, "l2", allow_zero=True)

    def _check_relation(self) -> tuple[Neighbouring, str]:
        """(relation, sampling) of the design; ValueError for a combination no analysis covers.

        The ``poisson`` design is DP-SGD: its rules are
        :func:`privml.accounting.check_dpsgd_options`, shared with the
        torch engine. The older designs are analysed under their own relation
        with independent coins (``linear``) or one partition (``direct``).
        """
        own = Neighbouring.REPLACE_ONE if self.design == "direct" else Neighbouring.ADD_REMOVE_ONE
        relation = own if self.neighbouring is None else Neighbouring.parse(self.neighbouring)
        if self.design == "poisson":
            sampling = "poisson" if self.sampling is None else self.sampling
            relation = check_dpsgd_options(neighbouring=relation, sampling=sampling, accountant=self.accountant,
                                           replace_one_bound=self.replace_one_bound)
            return relation, sampling
        if self.replace_one_bound not in REPLACE_ONE_BOUNDS:
            raise ValueError(f"replace_one_bound must be one of {', '.join(REPLACE_ONE_BOUNDS)}, "
                             f"got {self.replace_one_bound!r}")
        if relation is not own:
            raise ValueError(f"the {self.design} design is analysed under {own.value} neighbours only; "
                             "use design='poisson' for the other relation")
        if self.design == "direct":
            if self.sampling is not None:
                raise ValueError("the direct design partitions the data once: leave sampling unset")
            return relation, "partition"
        if self.sampling not in (None, "poisson"):
            if self.sampling == "fixed-size":
                raise ValueError("fixed-size sampling is available with design='poisson' only")
            raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {self.sampling!r}")
        return relation, "poisson"

    def fit(self, X: Any, y: Any) -> DPSGDClassifier:
        """Train on (X, y); sets ``weights_``, ``privacy_``, ``privacy_event_`` and ``fit_info_``.

        Every argument and hyper-parameter is checked, and the noise and the
        guarantee are fixed, before the first noise draw.
        """
        super().fit(X, y)  # runs _check_hyperparameters first
        return self

    def _planned_guarantee(self, n: int) -> PrivacyGuarantee:
        """The calibrated plan's guarantee (epsilon may be set through noise_multiplier): from n and the settings."""
        return self._plan(n).noise.guarantee

    def _sample_rate(self, n: int) -> float:
        if self.sample_rate is not None:
            return float(self.sample_rate)
        if self.batch_size is not None:
            if self.batch_size > n:
                raise ValueError(f"batch_size={self.batch_size} exceeds the number of records n={n}")
            return self.batch_size / n
        return min(1.0, DEFAULT_BATCH_SIZE / n)

    def _plan(self, n: int) -> _Plan:
        """Batches, noise and guarantee, from n and the hyper-parameters alone."""
        epsilon, delta = float(self.epsilon), float(self.delta)
        relation, sampling = self._check_relation()
        if self.design == "poisson":
            # DP-SGD's plan, shared with privml.torch.DPSGD: every privacy rule checked there, once.
            dpsgd = plan_dpsgd(
                n, delta=delta, epsilon=epsilon, accountant=self.accountant, neighbouring=relation, sampling=sampling,
                replace_one_bound=self.replace_one_bound, noise_multiplier=self.noise_multiplier,
                **self._rate(n), **self._length(),
            )
            info = {"sampling": sampling, **({"bound": dpsgd.bound} if dpsgd.sensitivity == 2 else {})}
            steps, event, guarantee, batch = dpsgd.steps, dpsgd.event, dpsgd.guarantee, dpsgd.batch_size
            assert steps and event and guarantee and batch  # n and the length are given: all planned
            noise = _Noise("gaussian", dpsgd.noise_multiplier, dpsgd.sensitivity, event, guarantee, info)
            return _Plan("poisson", steps, dpsgd.sample_rate, batch, steps * dpsgd.sample_rate, noise, sampling)
        q = self._sample_rate(n)
        if self.design == "direct":
            size = int(self.batch_size) if self.batch_size is not None else round(q * n)
            n_batches = n // size if size >= 1 else 0
            if n_batches < 1:
                raise ValueError(f"the direct design needs batches of at least one record; q n = {q * n:.3g}")
            noise = _direct_noise(epsilon, delta, self.noise_multiplier)
            plan = _Plan("direct", n_batches, 1.0 / n_batches, n / n_batches, 1.0, noise)
        else:
            steps = int(planned_steps(q=q, **self._length()) or 0)  # never None: _length gives steps or epochs
            noise = _linear_noise(epsilon, delta, self.noise_multiplier, q, steps)
            plan = _Plan(self.design, steps, q, q * n, steps * q, noise, sampling)
        _check_budget(plan.noise.guarantee, epsilon)
        return plan

    def _rate(self, n: int) -> dict[str, Any]:
        """The rate as given (batch_size), else sample_rate or the default expected batch capped at n."""
        return {"batch_size": self.batch_size} if self.batch_size is not None else {"sample_rate": self._sample_rate(n)}

    def _length(self) -> dict[str, Any]:
        """The run's length as given (steps), else the epochs or their default."""
        return {"steps": int(self.steps)} if self.steps is not None else {
            "epochs": DEFAULT_EPOCHS if self.epochs is None else float(self.epochs)}

    # ------------------------------------------------------------- training
    def _fit_private(
        self, X: np.ndarray, y: np.ndarray, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, PrivacyGuarantee, dict]:
        n, d = X.shape
        plan = self._plan(n)  # raises before any noise on a bad configuration
        loss = make_loss(n_classes)
        X, y = loss.check_data(X, y)
        row_norms = np.linalg.norm(X, axis=1)
        clip = float(self.clip_norm)
        rates = learning_rate_schedule(self.lr_schedule, float(self.learning_rate), plan.steps)
        averager = _Averager(self.averaging, plan.steps, float(self.tail_fraction), float(self.ema_decay))
        l2 = float(self.l2)
        weights = np.zeros(loss.parameter_shape(d))
        batches = self._batches(n, plan, rng)
        rows = BatchRows.for_fit(X, plan.batch_size, sparse=type(self)._clipped_sum is DPSGDClassifier._clipped_sum)

        with progress_bar(plan.steps, desc="DP-SGD", unit="step", enabled=self.progress) as bar:
            for step in range(plan.steps):
                index, divisor = next(batches)
                parts = rows.batches(index)  # CSR or cache-sized chunks (see _batch_rows): same sum
                total = sum(self._clipped_sum(loss, weights, b, y[part], clip, row_norms[part]) for part, b in parts)
                noisy = total + self._noise(plan, clip, weights.shape, rng)
                if self._audit_step is not None:
                    noisy = self._audit_step(index, noisy)
                # The divisor is public (see _batches), never the realised Poisson size.
                # l2 W is data-independent: added after clipping and normalising, at full weight.
                gradient = noisy / divisor + l2 * weights
                weights = weights - rates[step] * gradient
                averager.update(step, weights)
                bar.update(1)

        noise = plan.noise
        self.privacy_event_ = noise.event
        info = {
            "design": plan.design,
            "noise": noise.kind,
            "noise_multiplier": noise.multiplier,
            # the std of a Gaussian, or the scale b of the L2-Laplace density exp(-||z|| / b)
            ("noise_std" if noise.kind == "gaussian" else "noise_scale"): noise.multiplier * clip,
            "clip_norm": clip,
            "sensitivity": noise.sensitivity * clip,
            "neighbouring": noise.guarantee.neighbouring.value,
            "steps": plan.steps,
            "sample_rate": plan.sample_rate,
            "expected_batch_size": plan.batch_size,
            "epochs": plan.epochs,
            "accountant": noise.guarantee.accountant,
            **noise.info,
            "epsilon": noise.guarantee.epsilon,
            "delta": noise.guarantee.delta,
            "event": repr(noise.event),
        }
        return averager.result(weights), noise.guarantee, info

    def _batches(self, n: int, plan: _Plan, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, float]]:
        """Yield (indices, divisor) for each step: the batch and the public normaliser of its noisy sum.

        The divisor is the expected batch size ``q n`` under Poisson sampling:
        the realised size of a Poisson sample depends on which records are
        in the data, so dividing by it would release it without noise.
        """
        if plan.design == "direct":
            # A random partition drawn before, and independently of, the data values.
            for part in np.array_split(rng.permutation(n), plan.steps):
                yield part, float(part.size)
        elif plan.sampling == "fixed-size":
            # b distinct records, drawn afresh each step; b is public, so it is the divisor.
            size = round(plan.batch_size)
            while True:
                yield fixed_size_sample(n, size, rng), float(size)
        else:
            expected = plan.sample_rate * n
            while True:
                yield poisson_sample(n, plan.sample_rate, rng), expected

    def _clipped_sum(
        self, loss: Loss, weights: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float, row_norms: np.ndarray
    ) -> np.ndarray:
        """Sum of the whole per-example gradients, each clipped to ``clip`` (sensitivity C / 2C)."""
        return clipped_gradient_sum(loss, weights, X, y, clip, row_norms=row_norms)[0]

    def _noise(
        self, plan: _Plan, clip: float, shape: tuple[int, ...], rng: np.random.Generator
    ) -> np.ndarray:
        """One draw of the step's noise for a sum of sensitivity ``plan.noise.sensitivity * clip``.

        Gaussian with standard deviation, or L2-Laplace (one vector over the
        whole gradient) with scale, ``noise_multiplier * clip``.
        """
        return sample_noise(plan.noise.kind, plan.noise.multiplier * clip, shape, rng)

