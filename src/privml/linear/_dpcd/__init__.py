"""Differentially private (proximal) coordinate descent: DP-CD.

Mangold, Bellet, Salmon and Tommasi, "Differentially Private Coordinate
Descent for Composite Empirical Risk Minimization", ICML 2022 (Algorithm 1),
minimises the composite objective

    F(theta) = (1/n) sum_i loss(theta; x_i, y_i) + psi(theta),

    psi(theta) = l1 ||theta||_1 + (l2/2) ||theta||_2^2     (l1, l2 >= 0; the default is a light ridge),

by T outer iterations of K randomised proximal block steps::

    for t = 1..T:
        theta <- w_bar
        for k = 1..K:
            j ~ uniform{1..B}                                  (data-independent)
            g_j = (1/n) sum_i clip(grad_{theta_j} loss_i, C_j)  (L2 clipping per record)
            theta_j <- prox_{eta_j psi}(theta_j - eta_j (g_j + N(0, sigma_j^2 I)))
        w_bar <- (1/K) sum_{k=1..K} theta^k                    (average of the inner iterates)
    release w_bar

with step sizes ``eta_j = gamma / M_j`` from block smoothness constants
``M_j`` of the loss, computed from **public** per-feature bounds
``|x_j| <= b_j`` (never from the data).

Blocks. For a one-output loss (binary logistic, squared) the ``B = d`` blocks
are the coordinates, as in the paper. For a k-class model the default
(``blocks="feature"``) makes the ``B = d`` rows ``W[j, :]`` the blocks: a
step updates all k class weights of feature ``j`` from one softmax
evaluation, clipping each record's k-vector ``x_ij (p_i - e_{y_i})`` in L2
norm, with ``M_j = b_j^2 / 2`` (:func:`block_smoothness`). This is block
coordinate descent (Richtarik and Takac 2014), and the paper's analysis
carries over with blocks for coordinates. ``blocks="entry"`` keeps the
paper's literal form: ``B = d k`` entries ``W[j, c]`` (flat index ``j k + c``,
the order of :mod:`privml.losses`), one per step, ``M_j = b_j^2 / 4``. A row
costs what one entry costs (one softmax over the records), and its L2 clip
at ``C / sqrt(d)`` lets through about ``sqrt(k / 2)`` times more of the
typical softmax gradient (two dominant classes) than per-entry clips at
``C / sqrt(d k)`` for the same noise. On a validation split of MNIST at
epsilon = 1 (default ``gamma``, 10 passes): 86.6% accuracy by rows in 13 s,
74.7% by entries in 56 s; the former defaults (entries, ``gamma = 1``) gave
21.9% test accuracy. A step touches only the records with ``x_ij != 0``:
O(nnz_j k), so sparse features (image pixels) are cheap.

Privacy (replace-one neighbours)
--------------------------------
Replacing one record changes one of the n clipped terms of ``g_j`` by a
vector of L2 norm at most ``2 C_j``, so ``g_j`` has L2 sensitivity
``Delta_j = 2 C_j / n`` whatever the loss and whatever the block width:
clipping, not a Lipschitz constant, bounds it (the squared loss of
:class:`DPCDRegressor` has none). Adding isotropic ``N(0, sigma_j^2 I)`` with
``sigma_j = s Delta_j`` makes each step a Gaussian mechanism that is exactly
``(1/s)``-GDP (Dong, Roth and Su 2019, Theorem 2.7, in any dimension: the two
output distributions differ by a shift of L2 norm at most ``Delta_j``); the
block sequence is drawn independently of the data, so the ``T K`` steps are
an adaptive composition of Gaussian mechanisms, exactly ``sqrt(T K)/s``-GDP
(Dong, Roth and Su 2019, Corollary 3.3). The prox, the averaging and the
restarts are post-processing. ``calibration="gdp"`` (default) therefore takes
``s = sqrt(T K) / mu`` with ``mu = gaussian_mu(epsilon, delta)``, the largest
mu whose exact Gaussian curve meets (epsilon, delta) (Balle and Wang 2018,
Theorem 8). ``calibration="closed_form"`` uses the paper's Theorem 4.1,
``sigma_j^2 = 12 C_j^2 T K log(1/delta) / (n^2 epsilon^2)``, valid for
epsilon < 1 and delta < 1/3 only; it is kept for comparison and is always
noisier (``fit_info_`` reports both noise levels and their ratio).

Step sizes and clipping shares depend on ``M_j``, which DP-CD's convergence
analysis needs as block-wise smoothness constants (for one block per step,
the block descent lemma of Nesterov 2012 / Richtarik-Takac 2014 is what the
analysis of serial randomised coordinate descent uses; see
:meth:`privml.losses.Loss.coordinate_smoothness`). They never enter a
sensitivity: wrong bounds slow or destabilise convergence but cannot weaken
privacy. The same holds for the default step scale ``gamma``
(:func:`default_gamma`): a public function of ``n``, epsilon, delta, ``T``,
``K``, ``C`` and the bounds, which corrects the worst case in ``M_j`` to the
average curvature of unit-norm records and limits the noise the steps add to
the scores.

Defaults of :class:`DPCDClassifier` (tuned on a validation split of MNIST's
training set, held out from its test set; checked on digits): rows as blocks,
``T = 10`` passes, ``C = 0.5``, ``gamma`` from :func:`default_gamma`, a light
ridge ``l2 = 1e-5``. :class:`DPCDRegressor` keeps the paper's conservative
``gamma = 1`` and ``C = 1``: the squared loss has no bounded curvature factor
to exploit, and its scale is the target's.

The package holds one concept per module: :mod:`~privml.linear._dpcd.calibration`
(sensitivity, noise multipliers, the guarantee), :mod:`~privml.linear._dpcd.steps`
(prox, clipping, smoothness, step scale), :mod:`~privml.linear._dpcd.cache` (cached
scores for the inner loop), :mod:`~privml.linear._dpcd.solver` (settings and
:func:`dp_coordinate_descent`) and :mod:`~privml.linear._dpcd.estimators`
(:class:`DPCDClassifier`, :class:`DPCDRegressor`). Its public names are importable from here.
"""

from privml.linear._dpcd.calibration import (
    closed_form_applies,
    closed_form_noise_multiplier,
    coordinate_sensitivity,
    dpcd_guarantee,
    gdp_noise_multiplier,
)
from privml.linear._dpcd.estimators import DPCDClassifier, DPCDRegressor
from privml.linear._dpcd.solver import BLOCKS, CALIBRATIONS, DPCDResult, dp_coordinate_descent
from privml.linear._dpcd.steps import (
    CLIPPINGS,
    block_smoothness,
    clip_block_gradients,
    clip_coordinate_gradients,
    clip_thresholds,
    default_gamma,
    prox,
)

__all__ = [
    "BLOCKS",
    "CALIBRATIONS",
    "CLIPPINGS",
    "DPCDClassifier",
    "DPCDRegressor",
    "DPCDResult",
    "block_smoothness",
    "clip_block_gradients",
    "clip_coordinate_gradients",
    "clip_thresholds",
    "closed_form_applies",
    "closed_form_noise_multiplier",
    "coordinate_sensitivity",
    "default_gamma",
    "dp_coordinate_descent",
    "dpcd_guarantee",
    "gdp_noise_multiplier",
    "prox",
]
