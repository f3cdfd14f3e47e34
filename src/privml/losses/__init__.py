"""Losses for private linear models, with the constants private training relies on.

Each loss gives vectorised values, gradients, per-example gradients (for
DP-SGD clipping), per-example coordinate gradients from cached scores (for DP
coordinate descent), Hessian-vector products (for Newton-type solvers), and
its documented constants for records with ``||x||_2 <= 1``:

================================  =========  ==========  ============  =====================
loss                              lipschitz  smoothness  hessian_rank  coordinate_smoothness
================================  =========  ==========  ============  =====================
:class:`LogisticLoss`             1          1/4         1             b_j^2 / 4
:class:`HuberHingeLoss` (h)       1          1/(2h)      1             b_j^2 / (2h)
:class:`MultinomialLogisticLoss`  sqrt(2)    1/2         k - 1         b_j^2 / 4 per class
:class:`SquaredLoss`              inf        1           1             b_j^2
================================  =========  ==========  ============  =====================

:class:`RegularisedObjective` wraps a loss and a dataset into the L2
regularised (optionally objective-perturbed) ERM objective for scipy.
"""

from privml.losses._base import Loss, check_feature_bounds
from privml.losses._huber import HuberHingeLoss
from privml.losses._logistic import LogisticLoss
from privml.losses._margin import MarginLoss
from privml.losses._multinomial import MultinomialLogisticLoss
from privml.losses._objective import RegularisedObjective
from privml.losses._squared import SquaredLoss

__all__ = [
    "HuberHingeLoss",
    "LogisticLoss",
    "Loss",
    "MarginLoss",
    "MultinomialLogisticLoss",
    "RegularisedObjective",
    "SquaredLoss",
    "check_feature_bounds",
]
