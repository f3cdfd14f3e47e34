"""The neighbouring relation a privacy guarantee is stated under.

Differential privacy bounds how much one record can change the output
distribution; *which* change is allowed is the neighbouring relation, and an
(epsilon, delta) figure is meaningless without it.

- ``REPLACE_ONE``: datasets of the same size n that differ in one record
  (Chaudhuri, Monteleoni and Sarwate 2011). Used by every ERM method and by
  private prediction.
- ``ADD_REMOVE_ONE``: one dataset is the other plus one record (Abadi et al.
  2016; Mironov, Talwar and Zhang 2019). Used by DP-SGD with Poisson sampling.
  privml's DP-SGD divides the noisy sum by the *expected* batch size q n, so
  n is a public input: its guarantee holds between datasets of the same n
  where one record is replaced by a null record that contributes nothing (the
  "zero-out" view of add/remove, Kairouz et al. 2021, Sec. 3; Ponomareva et
  al. 2023, Sec. 5.1). :attr:`Neighbouring.detail` says so wherever a
  guarantee is printed or saved.

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

    @property
    def detail(self) -> str:
        """The relation stated exactly, as privml's methods use it (printed with every guarantee)."""
        if self is Neighbouring.REPLACE_ONE:
            return "replace-one: same n, one record replaced by any other"
        return ("add/remove-one with n public (zero-out view): same n, one record replaced by a null record "
                "that contributes nothing")

    @classmethod
    def parse(cls, value: Neighbouring | str) -> Neighbouring:
        """Accept an enum member or its string value (``"replace-one"``, ``"add/remove-one"``)."""
        if isinstance(value, cls):
            return value
        for member in cls:
            if value in (member.value, member.name, member.name.lower()):
                return member
        choices = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"unknown neighbouring relation {value!r}; expected one of {choices}")
