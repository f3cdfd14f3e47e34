"""Calibrate a mechanism parameter to a privacy budget: noise multipliers and accountants by name.

Every calibration in privml is one bracket-and-bisect search over a scalar
parameter whose privacy cost is monotone,
:func:`~privml.accounting._parameter_search.calibrate_parameter`: it returns the
*feasible* end of the final bracket, so the reported parameter always
satisfies the target exactly as the accountant certifies it.

:func:`calibrate_noise_multiplier` applies it to "the smallest noise multiplier
whose event, composed by an accountant, costs at most ``target_epsilon`` at
``delta``"; the feasible end is then the *noisier* end of the bracket.
:func:`privml.accounting.calibrate_dpsgd` does it for DP-SGD's sampled Gaussian steps.
:func:`make_accountant` maps the accountant names in :data:`ACCOUNTANTS` to
fresh accountants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from privml._validation import check_count, check_delta, check_epsilon
from privml.accounting._accountant import PrivacyAccountant
from privml.accounting._advanced import AdvancedCompositionAccountant
from privml.accounting._basic import BasicAccountant
from privml.accounting._events import DpEvent
from privml.accounting._gdp import GaussianDPAccountant
from privml.accounting._parameter_search import (
    _bracket_and_bisect,
    _check_hints,
    _check_tolerance,
)
from privml.accounting._pld import PLDAccountant
from privml.accounting._rdp import RDPAccountant
from privml.exceptions import UnsupportedEventError

#: Names accepted by :func:`make_accountant` (and by every ``accountant=`` argument).
ACCOUNTANTS: tuple[str, ...] = ("basic", "advanced", "optimal", "rdp", "zcdp", "gdp", "pld")

AccountantSpec = str | Callable[[], PrivacyAccountant]


def make_accountant(name: str) -> PrivacyAccountant:
    """Return a fresh, empty accountant for one of the names in :data:`ACCOUNTANTS`.

    ========== ===========================================================
    name       accountant
    ========== ===========================================================
    basic      :class:`~privml.accounting.BasicAccountant`
    advanced   :class:`~privml.accounting.AdvancedCompositionAccountant` (``"drv"``)
    optimal    :class:`~privml.accounting.AdvancedCompositionAccountant` (``"kov"``)
    rdp        :class:`~privml.accounting.RDPAccountant`
    zcdp       :class:`~privml.accounting.ZCDPAccountant`
    gdp        :class:`~privml.accounting.GaussianDPAccountant`
    pld        :class:`~privml.accounting.PLDAccountant`
    ========== ===========================================================

    Raises
    ------
    ValueError
        for a name not in :data:`ACCOUNTANTS`.
    """
    if not isinstance(name, str):
        raise TypeError(f"accountant name must be a string, got {type(name).__name__}")
    if name == "basic":
        return BasicAccountant()
    if name in ("advanced", "optimal"):
        return AdvancedCompositionAccountant(method="drv" if name == "advanced" else "kov")
    if name == "rdp":
        return RDPAccountant()
    if name == "zcdp":
        from privml.accounting._zcdp import ZCDPAccountant  # lazy(startup): scipy.optimize; `privml account` skips it

        return ZCDPAccountant()
    if name == "gdp":
        return GaussianDPAccountant()
    if name == "pld":
        return PLDAccountant()
    raise ValueError(f"unknown accountant {name!r}; expected one of {', '.join(ACCOUNTANTS)}")


@dataclass(frozen=True)
class NoiseCalibration:
    """Outcome of :func:`calibrate_noise_multiplier`.

    Attributes
    ----------
    noise_multiplier:
        The smallest noise multiplier found (within the tolerance) whose event
        costs at most the target: the noisier end of the final bracket.
    epsilon:
        The epsilon the accountant certifies for it at the requested delta;
        always ``<= target_epsilon``.
    iterations:
        Accountant evaluations spent by the final search (for ``"pld"`` the
        cheap RDP pre-search that supplies the bracket is not counted).
    accountant:
        Name of the accountant that certified ``epsilon``.
    """

    noise_multiplier: float
    epsilon: float
    iterations: int
    accountant: str


def _accountant_factory(accountant: AccountantSpec) -> tuple[Callable[[], PrivacyAccountant], str]:
    """Turn a name or a zero-argument factory into (factory, reported name)."""
    if isinstance(accountant, str):
        make_accountant(accountant)  # fail fast on an unknown name
        return (lambda: make_accountant(accountant)), accountant
    if not callable(accountant):
        raise TypeError(
            f"accountant must be a name in {ACCOUNTANTS} or a callable returning a PrivacyAccountant, "
            f"got {type(accountant).__name__}"
        )
    probe = accountant()
    if not isinstance(probe, PrivacyAccountant):
        raise TypeError(f"the accountant factory returned {type(probe).__name__}, not a PrivacyAccountant")
    return accountant, probe.name


def _epsilon_of(
    make_event: Callable[[float], DpEvent], factory: Callable[[], PrivacyAccountant], delta: float
) -> Callable[[float], float]:
    """The objective of noise calibration: epsilon at ``delta`` of one fresh ledger."""

    def epsilon(noise_multiplier: float) -> float:
        event = make_event(noise_multiplier)
        acc = factory()
        if acc.ledger.events:
            raise ValueError("the accountant factory must return an empty accountant")
        return acc.compose(event).get_epsilon(delta)

    return epsilon


def calibrate_noise_multiplier(
    make_event: Callable[[float], DpEvent],
    *,
    target_epsilon: float,
    delta: float,
    accountant: AccountantSpec = "rdp",
    lower: float | None = None,
    upper: float | None = None,
    tolerance: float = 1e-3,
    max_iterations: int = 100,
) -> NoiseCalibration:
    """Smallest noise multiplier whose event costs at most ``(target_epsilon, delta)``.

    Privacy: the returned multiplier ``s`` satisfies
    ``accountant.compose(make_event(s)).get_epsilon(delta) <= target_epsilon``,
    so the mechanism that ``make_event(s)`` describes is
    ``(epsilon, delta)``-DP with the reported ``epsilon <= target_epsilon``,
    under the neighbouring relation and the sensitivity that the event states
    (noise is in units of sensitivity), by whatever theorem the accountant
    implements. Among multipliers meeting the target, ``s`` is within
    ``tolerance * s`` of the smallest one: the less noisy end of the final
    bracket is certified *not* to meet it.

    Parameters
    ----------
    make_event:
        Maps a noise multiplier (> 0) to the event of the whole computation,
        e.g. ``lambda s: dpsgd_event(s, q, steps)`` (:mod:`privml.accounting._dpsgd`). Epsilon must fall as the
        multiplier grows.
    target_epsilon:
        Privacy budget epsilon (> 0).
    delta:
        Privacy budget delta in [0, 1).
    accountant:
        A name in :data:`ACCOUNTANTS` or a zero-argument callable returning a
        fresh :class:`PrivacyAccountant`. For ``"pld"`` without hints, an RDP
        calibration is run first: RDP's bound is looser than PLD's, so its
        multiplier ``s_rdp`` meets the target under PLD too, and the PLD search
        starts from the bracket ``[0.9 s_rdp, s_rdp]`` (checked and widened if
        wrong), which saves most of the expensive PLD evaluations.
    lower, upper:
        Optional bracket hints on the multiplier (checked, widened if wrong).
    tolerance:
        Relative precision on the multiplier.
    max_iterations:
        Maximum number of accountant evaluations.

    Returns
    -------
    NoiseCalibration

    Raises
    ------
    ValueError
        for bad arguments, or when no noise multiplier reaches the target (for
        instance ``delta`` below the delta that the events spend themselves).
    UnsupportedEventError
        if the accountant cannot account for the event.

    Examples
    --------
    >>> from privml.accounting._events import LaplaceEvent, SelfComposedEvent
    >>> result = calibrate_noise_multiplier(
    ...     lambda s: SelfComposedEvent(LaplaceEvent(s), 10), target_epsilon=1.0, delta=0.0,
    ...     accountant="basic")
    >>> 10.0 <= result.noise_multiplier <= 10.0 * (1 + 1e-3), result.epsilon <= 1.0
    (True, True)
    """
    # long-function: most of its length is the numpy-style docstring (parameters, guarantee, references); the code is
    # argument checks, the PLD bracket and one search.
    if not callable(make_event):
        raise TypeError(f"make_event must be callable, got {type(make_event).__name__}")
    target_epsilon = check_epsilon(target_epsilon, "target_epsilon")
    delta = check_delta(delta)
    lower, upper = _check_hints(lower, upper, integer=False)
    tolerance = _check_tolerance(tolerance)
    max_iterations = check_count(max_iterations, "max_iterations", minimum=2)
    factory, name = _accountant_factory(accountant)

    if accountant == "pld" and lower is None and upper is None:
        lower, upper = _rdp_bracket(make_event, target_epsilon, delta, tolerance, max_iterations)

    search = _bracket_and_bisect(
        _epsilon_of(make_event, factory, delta),
        target_epsilon,
        increasing=False,
        lower=lower,
        upper=upper,
        tolerance=tolerance,
        max_iterations=max_iterations,
        integer=False,
    )
    return NoiseCalibration(
        noise_multiplier=search.value, epsilon=search.objective, iterations=search.iterations, accountant=name
    )


def _rdp_bracket(
    make_event: Callable[[float], DpEvent],
    target_epsilon: float,
    delta: float,
    tolerance: float,
    max_iterations: int,
    *,
    accountant: AccountantSpec = "rdp",
) -> tuple[float | None, float | None]:
    """``[0.9 s_rdp, s_rdp]``, or no hint where RDP cannot account for the event.

    PLD's noise multiplier is typically 3-8% below RDP's, and a PLD evaluation
    costs more the less noise it is asked about, so the search approaches the
    threshold from above; a lower end that turns out feasible is widened.
    """
    try:
        rdp = calibrate_noise_multiplier(
            make_event,
            target_epsilon=target_epsilon,
            delta=delta,
            accountant=accountant,
            tolerance=tolerance,
            max_iterations=max_iterations,
        )
    except (UnsupportedEventError, ValueError, RuntimeError):
        # RDP may not support the event, or may not reach the target at this
        # delta (its conversion needs delta > 0): it is only a hint, so PLD
        # then searches unaided.
        return None, None
    return 0.9 * rdp.noise_multiplier, rdp.noise_multiplier

