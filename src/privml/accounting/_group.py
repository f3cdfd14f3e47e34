"""Replace-one guarantees from an add/remove-one accountant, by group privacy.

Under privml's add/remove-one relation (the zero-out view, n public), D and
D'' are neighbours when one record of D is replaced by a null record that
contributes nothing. A replace-one neighbour D' of D (x replaced by x') is
two such steps away: D -> D'' (x replaced by the null record) -> D' (the null
record replaced by x'). If M is (eps, delta)-DP under add/remove-one, then for
every output set S

    P[M(D) in S] <= e^eps P[M(D'') in S] + delta <= e^(2 eps) P[M(D') in S] + (1 + e^eps) delta,

so M is (2 eps, (1 + e^eps) delta)-DP under replace-one (group privacy for a
group of two, applied to approximate DP; Dwork and Roth 2014, Theorem 2.2,
states the pure-DP case, and the chain above is its approximate-DP form). It
holds at every eps, so the accountant reports the best eps.

This is the fallback for mechanisms without a replace-one analysis and the
yardstick for the tight replace-one accountants: it is never tighter than
the tight dominating pair (:mod:`privml.accounting._pld`), and usually
looser, because the two hops are bounded one after the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from privml.accounting._accountant import PrivacyAccountant
from privml.accounting._calibration import make_accountant
from privml.accounting._events import DpEvent, add_remove_twin
from privml.exceptions import UnsupportedEventError
from privml.neighbouring import Neighbouring

__all__ = ["GroupPrivacyAccountant", "replace_one_from_add_remove"]

# Fixed-point iterations for the best eps, and the relative step used to certify the last one.
_MAX_ITERATIONS = 200
_CERTIFY_STEP = 1e-7


def replace_one_from_add_remove(epsilon: float, delta: float) -> tuple[float, float]:
    """The replace-one ``(2 eps, (1 + e^eps) delta)`` of an add/remove-one ``(eps, delta)`` guarantee (see above).

    >>> replace_one_from_add_remove(1.0, 1e-6)
    (2.0, 3.718281828459045e-06)
    """
    if delta == 0 or epsilon > 700:
        return 2.0 * epsilon, (1.0 if delta > 0 else 0.0)
    return 2.0 * epsilon, min(1.0, (1.0 + math.exp(epsilon)) * delta)


class GroupPrivacyAccountant(PrivacyAccountant):
    """Replace-one (epsilon, delta) from an add/remove-one accountant by group privacy.

    Parameters
    ----------
    inner:
        A name accepted by :func:`~privml.accounting.make_accountant` (e.g.
        ``"pld"`` or ``"rdp"``) or a zero-argument factory of a fresh
        accountant. It accounts for the add/remove-one twin of each event.

    Notes
    -----
    Neighbouring relation: replace-one (same n, one record replaced by any
    other); every composed event must be stated under replace-one and have
    an add/remove-one twin (:func:`~privml.accounting.add_remove_twin`:
    Poisson-sampled events, whose noise is stated against one record's
    contribution). Sensitivity: that of the twin under add/remove-one (the
    clip norm for DP-SGD); a replaced record is two add/remove steps away.
    Theorem: group privacy for a group of two, (eps, delta) under
    add/remove-one => (2 eps, (1 + e^eps) delta) under replace-one (Dwork and
    Roth 2014, Theorem 2.2 and the two-step chain in the module docstring).

    ``get_delta(E)`` is ``(1 + e^(E/2)) delta_ar(E/2)``; ``get_epsilon(delta)``
    is ``2 eps`` for the smallest eps (found by a fixed-point iteration,
    then certified with ``get_delta`` of the inner accountant) with
    ``(1 + e^eps) delta_ar(eps) <= delta``.

    Examples
    --------
    >>> from privml.accounting._dpsgd import dpsgd_event
    >>> acc = GroupPrivacyAccountant("pld").compose(dpsgd_event(1.1, 0.01, 100, neighbouring="replace-one"))
    >>> acc.name, str(acc.neighbouring)
    ('pld+group', 'replace-one')
    """

    name = "group"

    def __init__(self, inner: str | Callable[[], PrivacyAccountant] = "pld") -> None:
        super().__init__()
        if isinstance(inner, str):
            self._inner = make_accountant(inner)
        elif callable(inner):
            made = inner()
            if not isinstance(made, PrivacyAccountant):
                raise TypeError(
                    f"the inner factory returned {type(made).__name__}, not a PrivacyAccountant"
                )
            self._inner = made
        else:
            raise TypeError(
                f"inner must be an accountant name or factory, got {type(inner).__name__}"
            )
        if self._inner.ledger.events:
            raise ValueError("the inner accountant must be empty")
        self.name = f"{self._inner.name}+group"

    @property
    def inner(self) -> PrivacyAccountant:
        """The add/remove-one accountant (its ledger holds the twins)."""
        return self._inner

    def supports(self, event: DpEvent) -> bool:
        """Replace-one events whose add/remove-one twin the inner accountant supports."""
        if event.neighbouring is not Neighbouring.REPLACE_ONE:
            return False
        twin = add_remove_twin(event)
        return twin is not None and self._inner.supports(twin)

    def _compose(self, event: DpEvent, count: int) -> None:
        twin = add_remove_twin(event)
        if twin is None:
            raise UnsupportedEventError(f"{event!r} has no add/remove-one twin")
        self._inner.compose(twin, count)

    def _group_delta(self, epsilon: float) -> float:
        """(1 + e^eps) delta_ar(eps): the replace-one delta at 2 eps."""
        if epsilon > 700:
            return 1.0 if self._inner.get_delta(epsilon) > 0 else 0.0
        return min(1.0, (1.0 + math.exp(epsilon)) * self._inner.get_delta(epsilon))

    def _get_delta(self, epsilon: float) -> float:
        return self._group_delta(epsilon / 2.0)

    def _get_epsilon(self, delta: float) -> float:
        # eps_{k+1} = eps_ar(delta / (1 + e^eps_k)) increases from eps_ar(delta / 2) to the smallest fixed point.
        eps = self._inner.get_epsilon(delta / 2.0)
        for _ in range(_MAX_ITERATIONS):
            if not math.isfinite(eps) or eps > 700:
                return math.inf
            nxt = self._inner.get_epsilon(delta / (1.0 + math.exp(eps)))
            converged = nxt <= eps + 1e-12 * (1.0 + eps)
            eps = max(eps, nxt)
            if converged:
                break
        # Certify: the reported value must satisfy the group inequality as the inner accountant evaluates it.
        step = _CERTIFY_STEP * max(1.0, eps)
        for _ in range(60):
            if self._group_delta(eps) <= delta:
                return 2.0 * eps
            eps += step
            step *= 2.0
        return math.inf
