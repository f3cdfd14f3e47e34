"""Optional dependencies: one line naming the extra that provides a missing one.

PyTorch is the ``torch`` extra (README, section 9): every CNN method and model
file needs it, and the core install has none. The CLI, the study and the
server turn a missing torch into this line (exit 2 from the CLI), never an
import traceback.
"""

from __future__ import annotations

TORCH_HINT = "needs PyTorch, which the core install lacks: install the torch extra, pip install 'privml[torch]'"


def torch_is_missing(exc: ImportError) -> bool:
    """Whether ``exc`` is torch itself (or one of its modules) failing to import, not another module."""
    return (exc.name or "").partition(".")[0] == "torch"


def import_torch_or_explain(what: str) -> None:
    """Import torch, or raise a one-line ``ValueError``: ``what`` (e.g. "--method dpsgd-cnn") needs the extra."""
    try:
        import torch  # lazy(extra): whether the torch extra is installed  # noqa: F401
    except ImportError as exc:
        if not torch_is_missing(exc):
            raise
        raise ValueError(f"{what} {TORCH_HINT}") from None
