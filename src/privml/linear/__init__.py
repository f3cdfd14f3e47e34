"""Private training of linear models (replace-one neighbours unless stated).

=================================  ==========  ===========================================
estimator                          method      guarantee
=================================  ==========  ===========================================
OutputPerturbationClassifier       output      eps-DP (L2-Laplace) or (eps, delta) (Gaussian)
ObjectivePerturbationClassifier    objective   eps-DP or (eps, delta) (CMS11, KST12 variants)
DPSGDClassifier                    dpsgd       (eps, delta), add/remove-one, RDP/PLD accounting
DPCDClassifier, DPCDRegressor      dpcd        (eps, delta), exact Gaussian-DP composition
NonPrivateClassifier               nonprivate  none (the baseline)
=================================  ==========  ===========================================

All share the scikit-learn interface of :class:`PrivateLinearClassifier`
(``fit``, ``predict``, ``predict_proba``, ``privacy_``), take the class set as
a public input, and save to ``.npz`` + JSON with :func:`privml.io.save_model`.
"""

from privml.linear._base import PrivateLinearClassifier
from privml.linear._dpcd import DPCDClassifier, DPCDRegressor
from privml.linear._dpsgd import DPSGDClassifier
from privml.linear._nonprivate import NonPrivateClassifier
from privml.linear._objective_perturbation import ObjectivePerturbationClassifier
from privml.linear._output_perturbation import OutputPerturbationClassifier

__all__ = [
    "DPCDClassifier",
    "DPCDRegressor",
    "DPSGDClassifier",
    "NonPrivateClassifier",
    "ObjectivePerturbationClassifier",
    "OutputPerturbationClassifier",
    "PrivateLinearClassifier",
]
