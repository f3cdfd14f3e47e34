"""Privacy accounting: describe what ran (events), then bound it (accountants).

Events (immutable, each with a neighbouring relation):
    GaussianEvent, LaplaceEvent, EpsilonDeltaEvent, ExponentialEvent,
    PoissonSampledEvent (add/remove-one or replace-one), SampledWithoutReplacementEvent
    (fixed-size batches, replace-one), SelfComposedEvent, ComposedEvent, and ``dpsgd_event``.

Accountants (one interface: ``compose(event, count=1)``, ``get_epsilon(delta)``,
``get_delta(epsilon)``, ``supports(event)``):

==========  ==============================  ==========================================
name        class                           use it for
==========  ==============================  ==========================================
basic       BasicAccountant                 pure/approximate DP steps, sum of budgets
advanced    AdvancedCompositionAccountant   many (eps, delta) steps (DRV 2010)
optimal     AdvancedCompositionAccountant   homogeneous (eps, delta) steps, exact (KOV 2015)
rdp         RDPAccountant                   DP-SGD, fast and standard (Mironov et al.)
zcdp        ZCDPAccountant                  Gaussian / exponential mechanisms, no sampling
gdp         GaussianDPAccountant            unsampled Gaussians, exact (Dong-Roth-Su)
pld         PLDAccountant                   DP-SGD, tightest numerical bound
==========  ==============================  ==========================================

``GroupPrivacyAccountant(inner)`` turns an add/remove-one accountant into a
replace-one one by group privacy (the fallback and the yardstick of the tight
replace-one analyses in ``pld`` and ``rdp``).

``calibrate_noise_multiplier`` finds the smallest noise for a target epsilon
with any of them; ``make_accountant(name)`` builds one by name.
``analytic_gaussian_sigma`` and ``classic_gaussian_sigma`` calibrate one
Gaussian release; ``basic_composition``, ``advanced_composition`` and
``optimal_composition_epsilon`` compose (epsilon, delta) steps by formula.
"""

# Names are imported on first use (PEP 562), so `privml account` and every module that needs
# one accountant do not pay for scipy.optimize and the rest (start-up, issue 18).
import importlib
from typing import TYPE_CHECKING, Any

_WHERE: dict[str, str] = {
    "ACCOUNTANTS": "privml.accounting._calibration",
    "AdvancedCompositionAccountant": "privml.accounting._advanced",
    "BasicAccountant": "privml.accounting._basic",
    "ComposedEvent": "privml.accounting._events",
    "DPSGDPlan": "privml.accounting._dpsgd",
    "DPSGD_ACCOUNTANTS": "privml.accounting._dpsgd",
    "DpEvent": "privml.accounting._events",
    "EpsilonDeltaEvent": "privml.accounting._events",
    "ExponentialEvent": "privml.accounting._events",
    "GaussianDPAccountant": "privml.accounting._gdp",
    "GaussianEvent": "privml.accounting._events",
    "GroupPrivacyAccountant": "privml.accounting._group",
    "LaplaceEvent": "privml.accounting._events",
    "PLDAccountant": "privml.accounting._pld",
    "PoissonSampledEvent": "privml.accounting._events",
    "PrivacyAccountant": "privml.accounting._accountant",
    "RDPAccountant": "privml.accounting._rdp",
    "SampledWithoutReplacementEvent": "privml.accounting._events",
    "SelfComposedEvent": "privml.accounting._events",
    "ZCDPAccountant": "privml.accounting._zcdp",
    "add_remove_twin": "privml.accounting._events",
    "advanced_composition": "privml.accounting._composition",
    "analytic_gaussian_sigma": "privml.accounting._analytic_gaussian",
    "basic_composition": "privml.accounting._composition",
    "classic_gaussian_sigma": "privml.accounting._analytic_gaussian",
    "optimal_composition_epsilon": "privml.accounting._composition",
    "REPLACE_ONE_BOUNDS": "privml.accounting._dpsgd",
    "SAMPLINGS": "privml.accounting._dpsgd",
    "calibrate_dpsgd": "privml.accounting._dpsgd",
    "check_dpsgd_options": "privml.accounting._dpsgd",
    "calibrate_noise_multiplier": "privml.accounting._calibration",
    "dpsgd_accountant": "privml.accounting._dpsgd",
    "dpsgd_event": "privml.accounting._dpsgd",
    "make_accountant": "privml.accounting._calibration",
    "plan_dpsgd": "privml.accounting._dpsgd",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'privml.accounting' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from privml.accounting._accountant import PrivacyAccountant
    from privml.accounting._advanced import AdvancedCompositionAccountant
    from privml.accounting._analytic_gaussian import analytic_gaussian_sigma, classic_gaussian_sigma
    from privml.accounting._basic import BasicAccountant
    from privml.accounting._calibration import ACCOUNTANTS, calibrate_noise_multiplier, make_accountant
    from privml.accounting._composition import advanced_composition, basic_composition, optimal_composition_epsilon
    from privml.accounting._dpsgd import (
        DPSGD_ACCOUNTANTS,
        REPLACE_ONE_BOUNDS,
        SAMPLINGS,
        DPSGDPlan,
        calibrate_dpsgd,
        check_dpsgd_options,
        dpsgd_accountant,
        dpsgd_event,
        plan_dpsgd,
    )
    from privml.accounting._events import (
        ComposedEvent,
        DpEvent,
        EpsilonDeltaEvent,
        ExponentialEvent,
        GaussianEvent,
        LaplaceEvent,
        PoissonSampledEvent,
        SampledWithoutReplacementEvent,
        SelfComposedEvent,
        add_remove_twin,
    )
    from privml.accounting._gdp import GaussianDPAccountant
    from privml.accounting._group import GroupPrivacyAccountant
    from privml.accounting._pld import PLDAccountant
    from privml.accounting._rdp import RDPAccountant
    from privml.accounting._zcdp import ZCDPAccountant

__all__ = [
    "ACCOUNTANTS",
    "AdvancedCompositionAccountant",
    "DPSGDPlan",
    "DPSGD_ACCOUNTANTS",
    "BasicAccountant",
    "ComposedEvent",
    "DpEvent",
    "EpsilonDeltaEvent",
    "ExponentialEvent",
    "GaussianDPAccountant",
    "GaussianEvent",
    "GroupPrivacyAccountant",
    "LaplaceEvent",
    "PLDAccountant",
    "PoissonSampledEvent",
    "PrivacyAccountant",
    "RDPAccountant",
    "SampledWithoutReplacementEvent",
    "SelfComposedEvent",
    "ZCDPAccountant",
    "REPLACE_ONE_BOUNDS",
    "SAMPLINGS",
    "add_remove_twin",
    "advanced_composition",
    "analytic_gaussian_sigma",
    "basic_composition",
    "calibrate_dpsgd",
    "calibrate_noise_multiplier",
    "check_dpsgd_options",
    "classic_gaussian_sigma",
    "dpsgd_accountant",
    "dpsgd_event",
    "make_accountant",
    "optimal_composition_epsilon",
    "plan_dpsgd",
]
