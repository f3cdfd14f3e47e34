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
"""

# Names are imported on first use (PEP 562), so `privml account` and every module that needs
# one accountant do not pay for scipy.optimize and the rest (start-up, issue 18).
import importlib
from typing import TYPE_CHECKING, Any

_WHERE: dict[str, str] = {
    "ACCOUNTANTS": "privml.accounting.calibration",
    "AdvancedCompositionAccountant": "privml.accounting.advanced",
    "BasicAccountant": "privml.accounting.basic",
    "ComposedEvent": "privml.accounting.events",
    "DPSGDPlan": "privml.accounting.dpsgd",
    "DPSGD_ACCOUNTANTS": "privml.accounting.dpsgd",
    "DpEvent": "privml.accounting.events",
    "EpsilonDeltaEvent": "privml.accounting.events",
    "ExponentialEvent": "privml.accounting.events",
    "GaussianDPAccountant": "privml.accounting.gdp",
    "GaussianEvent": "privml.accounting.events",
    "GroupPrivacyAccountant": "privml.accounting.group",
    "LaplaceEvent": "privml.accounting.events",
    "PLDAccountant": "privml.accounting.pld",
    "PoissonSampledEvent": "privml.accounting.events",
    "PrivacyAccountant": "privml.accounting.accountant",
    "RDPAccountant": "privml.accounting.rdp",
    "SampledWithoutReplacementEvent": "privml.accounting.events",
    "SelfComposedEvent": "privml.accounting.events",
    "ZCDPAccountant": "privml.accounting.zcdp",
    "add_remove_twin": "privml.accounting.events",
    "REPLACE_ONE_BOUNDS": "privml.accounting.dpsgd",
    "SAMPLINGS": "privml.accounting.dpsgd",
    "calibrate_dpsgd": "privml.accounting.dpsgd",
    "check_dpsgd_options": "privml.accounting.dpsgd",
    "calibrate_noise_multiplier": "privml.accounting.calibration",
    "dpsgd_accountant": "privml.accounting.dpsgd",
    "dpsgd_event": "privml.accounting.dpsgd",
    "make_accountant": "privml.accounting.calibration",
    "plan_dpsgd": "privml.accounting.dpsgd",
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
    from privml.accounting.accountant import PrivacyAccountant
    from privml.accounting.advanced import AdvancedCompositionAccountant
    from privml.accounting.basic import BasicAccountant
    from privml.accounting.calibration import ACCOUNTANTS, calibrate_noise_multiplier, make_accountant
    from privml.accounting.dpsgd import (
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
    from privml.accounting.events import (
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
    from privml.accounting.gdp import GaussianDPAccountant
    from privml.accounting.group import GroupPrivacyAccountant
    from privml.accounting.pld import PLDAccountant
    from privml.accounting.rdp import RDPAccountant
    from privml.accounting.zcdp import ZCDPAccountant

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
    "calibrate_dpsgd",
    "calibrate_noise_multiplier",
    "check_dpsgd_options",
    "dpsgd_accountant",
    "dpsgd_event",
    "make_accountant",
    "plan_dpsgd",
]
