"""Exceptions and warnings shared across privml."""


class PrivacyLeakWarning(UserWarning):
    """A public parameter (class set, feature bound, smoothness constant) was
    taken from the private data, which leaks information outside the stated
    guarantee. Pass the parameter explicitly to silence it."""


class BudgetExhausted(RuntimeError):
    """A privacy budget is spent: the query was refused and nothing was released."""


class UnsupportedEventError(ValueError):
    """An accountant was asked to compose a privacy event it cannot account for."""


class ConvergenceError(RuntimeError):
    """An optimiser did not reach its tolerance.

    Kept for compatibility: privml's fits no longer raise it. Whether a
    solver converges depends on the data, so a refusal would release a bit
    no guarantee covers; :func:`privml.linear.solvers.minimise_objective`
    finishes with a certified phase instead (see :mod:`privml.release`).

    Attributes
    ----------
    result:
        The solver's last state (for diagnosis only: releasing it would void
        the proof).
    """

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result
