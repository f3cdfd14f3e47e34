"""Exceptions and warnings shared across privml, and the roots every privml exception and warning has.

Every exception privml defines is a :class:`PrivmlError` (``except
PrivmlError`` catches them all) and keeps the built-in base its callers and
the CLI rely on (``ValueError`` for bad input, which the CLI reports in one
line, ``RuntimeError``, ``FileNotFoundError``); every warning is a
:class:`PrivmlWarning`.
"""


class PrivmlError(Exception):
    """The root of privml's exceptions (each also derives from the built-in exception it stands for)."""


class PrivmlWarning(UserWarning):
    """The root of privml's warnings."""


class PrivacyLeakWarning(PrivmlWarning):
    """A public parameter (class set, feature bound, smoothness constant) was
    taken from the private data, which leaks information outside the stated
    guarantee. Pass the parameter explicitly to silence it."""


class BudgetExhausted(PrivmlError, RuntimeError):
    """A privacy budget is spent: the query was refused and nothing was released."""


class LedgerUnavailable(PrivmlError, ValueError):
    """A persistent ledger's database cannot be reached (refused, down, unreachable): nothing was charged.

    A ``ValueError`` for the command line (one line, exit 2, when it cannot
    connect at start); ``privml serve`` answers 503 when a reconnection fails.
    """


class UnsupportedEventError(PrivmlError, ValueError):
    """An accountant was asked to compose a privacy event it cannot account for."""


class ConvergenceError(PrivmlError, RuntimeError):
    """An optimiser did not reach its tolerance.

    Whether a solver converges depends on the data, so a refusal would
    release a bit no guarantee covers: :func:`privml.linear._solvers.minimise_objective`
    finishes with a certified phase whose step count is bounded by public
    quantities, and ``tol`` is at least
    :data:`~privml.linear._solvers.MIN_TOL`, within float64's reach. Raised
    only if that phase still falls short (floating point): a model whose
    sensitivity's slack was not certified is never handed to be released.

    Attributes
    ----------
    result:
        The solver's last state (for diagnosis only: releasing it would void
        the proof).
    """

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class WorkerLost(PrivmlError, RuntimeError):
    """A worker process of a study died (killed from outside, say for memory); the finished runs are kept."""
