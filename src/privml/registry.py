"""One entry per method privml can save, load and serve: what it is and what it releases.

Model files, ``privml predict``/``serve`` and the release-invariance tests read
this table instead of keeping lists of their own. Each :class:`MethodSpec`
states

- ``target``: the estimator class that reads the file back ("module:Class",
  imported only when needed, so torch stays an extra);
- ``kind``: private training (the file itself is the DP release), private
  prediction (the file is the server's secret; its *answers* are released),
  baseline (not private at all) or selection (Accuracy First);
- ``neighbouring``: the relation its guarantee holds under (None: no guarantee);
- ``dp_fields``: fields of its model file that are DP outputs, so they may
  differ between neighbouring datasets (``"arrays/<name>"``,
  ``"fit_info/<key>"`` or ``"privacy/<key>"``; shell-style patterns match);
- ``secret_fields``: fields that hold the non-private model of a private
  predictor or baseline. Such a file must never be published; what leaves the
  server is its noisy answers.

Every other field of a model file must be byte-identical when the same method
runs with the same randomness on neighbouring datasets: that is what
``tests/test_release_invariance.py`` checks for every entry here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import Enum

from privml.neighbouring import Neighbouring

__all__ = ["METHODS", "Kind", "MethodSpec", "estimator_class", "get_spec", "names_of_kind"]


class Kind(str, Enum):
    """What a method's model file is, privacy-wise."""

    PRIVATE_TRAINING = "private-training"
    PRIVATE_PREDICTION = "private-prediction"
    BASELINE = "baseline"
    SELECTION = "selection"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class MethodSpec:
    """A method as model files and serving know it (see the module docstring)."""

    name: str
    target: str
    kind: Kind
    neighbouring: Neighbouring | None
    dp_fields: frozenset[str] = frozenset()
    secret_fields: frozenset[str] = frozenset()

    @property
    def release_is_private(self) -> bool:
        """Whether the model file itself may be published (its predictions then cost nothing)."""
        return self.kind in (Kind.PRIVATE_TRAINING, Kind.SELECTION)


_WEIGHTS = frozenset({"arrays/weights"})
#: DP-SGD is analysed under add/remove-one in the zero-out view: n is public and
#: the neighbour has one record replaced by a null record that contributes no
#: gradient (Kairouz et al. 2021, Sec. 3; Ponomareva et al. 2023, Sec. 5.1).
_ZERO_OUT = Neighbouring.ADD_REMOVE_ONE

METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec("nonprivate", "privml.linear._nonprivate:NonPrivateClassifier", Kind.BASELINE, None,
                   secret_fields=_WEIGHTS),
        MethodSpec("output", "privml.linear._output_perturbation:OutputPerturbationClassifier",
                   Kind.PRIVATE_TRAINING, Neighbouring.REPLACE_ONE, dp_fields=_WEIGHTS),
        MethodSpec("objective", "privml.linear._objective_perturbation:ObjectivePerturbationClassifier",
                   Kind.PRIVATE_TRAINING, Neighbouring.REPLACE_ONE, dp_fields=_WEIGHTS),
        MethodSpec("dpsgd", "privml.linear._dpsgd:DPSGDClassifier", Kind.PRIVATE_TRAINING, _ZERO_OUT,
                   dp_fields=_WEIGHTS),
        MethodSpec("dpcd", "privml.linear._dpcd:DPCDClassifier", Kind.PRIVATE_TRAINING, Neighbouring.REPLACE_ONE,
                   dp_fields=_WEIGHTS),
        MethodSpec("dpcd-regressor", "privml.linear._dpcd:DPCDRegressor", Kind.PRIVATE_TRAINING,
                   Neighbouring.REPLACE_ONE, dp_fields=_WEIGHTS),
        # The search publishes every model up to the one AboveThreshold stops at; where it
        # stops (and so the ex-post epsilon) is itself part of the DP output.
        MethodSpec("accuracy-first", "privml.selection._accuracy_first:AccuracyFirstClassifier", Kind.SELECTION,
                   Neighbouring.REPLACE_ONE,
                   dp_fields=_WEIGHTS | {"fit_info/stopped_at", "fit_info/met_target", "privacy/epsilon",
                                         "privacy/delta"}),
        MethodSpec("prediction-sensitivity", "privml.prediction._sensitivity:PredictionSensitivity",
                   Kind.PRIVATE_PREDICTION, Neighbouring.REPLACE_ONE, secret_fields=_WEIGHTS),
        MethodSpec("subsample-aggregate", "privml.prediction._aggregate:SubsampleAndAggregate",
                   Kind.PRIVATE_PREDICTION, Neighbouring.REPLACE_ONE,
                   secret_fields=frozenset({"arrays/teacher_weights"})),
        # state_dict arrays + the architecture name in the JSON params; torch is imported only to load one
        MethodSpec("dpsgd-cnn", "privml.torch._classifier:TorchClassifier", Kind.PRIVATE_TRAINING, _ZERO_OUT,
                   dp_fields=frozenset({"arrays/state.*"})),
        # TorchClassifier(epsilon=inf): the same class, trained without clipping or noise; its weights are secret
        MethodSpec("nonprivate-cnn", "privml.torch._classifier:TorchClassifier", Kind.BASELINE, None,
                   secret_fields=frozenset({"arrays/state.*"})),
        # DP-SGD on ScatterNet features (Tramer & Boneh 2021): the head's state_dict; the features are
        # recomputed from the settings (J, L, groups, input_shape), a public transform of each record alone
        MethodSpec("scatter-linear", "privml.torch._scatter_classifier:ScatterClassifier", Kind.PRIVATE_TRAINING,
                   _ZERO_OUT, dp_fields=frozenset({"arrays/state.*"})),
        MethodSpec("scatter-cnn", "privml.torch._scatter_classifier:ScatterClassifier", Kind.PRIVATE_TRAINING,
                   _ZERO_OUT, dp_fields=frozenset({"arrays/state.*"})),
    )
}


def get_spec(name: str) -> MethodSpec:
    """The spec of ``name``; ValueError naming the known methods otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; methods are {', '.join(METHODS)}") from None


def names_of_kind(*kinds: Kind) -> tuple[str, ...]:
    """Names of the methods of the given kinds, in registry order."""
    return tuple(name for name, spec in METHODS.items() if spec.kind in kinds)


def estimator_class(name: str) -> type:
    """The class that fits and reads back ``name`` (imports its module)."""
    module_name, class_name = get_spec(name).target.split(":")
    return getattr(importlib.import_module(module_name), class_name)
