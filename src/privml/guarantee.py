"""The privacy guarantee carried by every fitted estimator and mechanism."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from privml.neighbouring import Neighbouring


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An (epsilon, delta)-DP guarantee stated under a neighbouring relation.

    Attributes
    ----------
    epsilon, delta:
        The guarantee: for neighbouring D, D' and any output set S,
        P[M(D) in S] <= e^epsilon P[M(D') in S] + delta.
    neighbouring:
        The relation the guarantee holds for (see :class:`Neighbouring`).
    accountant:
        How the total was computed (``"basic"``, ``"rdp"``, ``"pld"``, ``"gdp"``, ...).
    """

    epsilon: float
    delta: float
    neighbouring: Neighbouring
    accountant: str

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0) or math.isnan(self.epsilon):
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon!r}")
        if not (0 <= self.delta <= 1):
            raise ValueError(f"delta must be in [0, 1], got {self.delta!r}")
        object.__setattr__(self, "neighbouring", Neighbouring.parse(self.neighbouring))

    def to_dict(self) -> dict:
        """JSON-ready dictionary: the relation as its string value, stated exactly in ``neighbouring_detail``."""
        out = asdict(self)
        out["neighbouring"] = self.neighbouring.value
        out["neighbouring_detail"] = self.neighbouring.detail
        return out

    @classmethod
    def from_dict(cls, data: dict) -> PrivacyGuarantee:
        return cls(
            epsilon=float(data["epsilon"]),
            delta=float(data["delta"]),
            neighbouring=Neighbouring.parse(data["neighbouring"]),
            accountant=str(data["accountant"]),
        )

    def __str__(self) -> str:
        zero_out = " (n public, zero-out view)" if self.neighbouring is Neighbouring.ADD_REMOVE_ONE else ""
        return (
            f"({self.epsilon:.4g}, {self.delta:.3g})-DP under {self.neighbouring.value} "
            f"neighbours{zero_out} [{self.accountant}]"
        )
