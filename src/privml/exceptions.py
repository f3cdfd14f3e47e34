"""Exceptions and warnings shared across privml."""


class PrivacyLeakWarning(UserWarning):
    """A public parameter (class set, feature bound, smoothness constant) was
    taken from the private data, which leaks information outside the stated
    guarantee. Pass the parameter explicitly to silence it."""


class BudgetExhausted(RuntimeError):
    """A privacy budget is spent: the query was refused and nothing was released."""


class UnsupportedEventError(ValueError):
    """An accountant was asked to compose a privacy event it cannot account for."""
