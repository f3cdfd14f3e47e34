"""The neighbouring relation a privacy guarantee is stated under.

Differential privacy bounds how much one record can change the output
distribution; *which* change is allowed is the neighbouring relation, and an
(epsilon, delta) figure is meaningless without it.

- ``REPLACE_ONE``: datasets of the same size n that differ in one record
  (Chaudhuri, Monteleoni and Sarwate 2011). Used by every ERM method and by
  private prediction.
- ``ADD_REMOVE_ONE``: one dataset is the other plus one record (Abadi et al.
  2016; Mironov, Talwar and Zhang 2019). Used by DP-SGD with Poisson sampling.

An add/remove guarantee of (eps, delta) implies a replace-one guarantee of
(2 eps, (1 + e^eps) delta) by group privacy over the remove-then-add path.
"""

from __future__ import annotations

from enum import Enum


class Neighbouring(str, Enum):
    """Neighbouring relation between datasets."""

    REPLACE_ONE = "replace-one"
    ADD_REMOVE_ONE = "add/remove-one"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: "Neighbouring | str") -> "Neighbouring":
        """Accept an enum member or its string value (``"replace-one"``, ``"add/remove-one"``)."""
        if isinstance(value, cls):
            return value
        for member in cls:
            if value in (member.value, member.name, member.name.lower()):
                return member
        choices = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"unknown neighbouring relation {value!r}; expected one of {choices}")
