"""privml: differentially private machine learning.

Private training, private prediction, privacy accounting and privacy auditing
with the ergonomics of scikit-learn. Every privacy-relevant function documents
its neighbouring relation, the sensitivity it assumes and the theorem it uses.
"""

from privml.exceptions import BudgetExhausted, ConvergenceError, PrivacyLeakWarning, UnsupportedEventError
from privml.guarantee import PrivacyGuarantee
from privml.neighbouring import Neighbouring

__version__ = "0.1.0"

__all__ = [
    "BudgetExhausted",
    "ConvergenceError",
    "Neighbouring",
    "PrivacyGuarantee",
    "PrivacyLeakWarning",
    "UnsupportedEventError",
    "__version__",
]
