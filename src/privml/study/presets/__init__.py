"""Built-in studies, one TOML file each (package data).

``quick`` is the demo (every linear and private-prediction method, a few
points per figure, under 10 minutes on 2 cores); ``quick-ci`` is the same on
scikit-learn's digits (no download); ``own-data`` is for a user's CSV (every
record, feature and class; sweeps over the privacy settings only); ``paper-mnist-linear`` reproduces
Figures 1-6 of van der Maaten & Hannun (2020); ``paper-cnn`` and
``paper-cnn-fashion`` compare DP-SGD with subsample-and-aggregate for small
CNNs on MNIST and Fashion-MNIST (their Section 4.3; hours on a CPU, so the
CNN methods are not in ``quick``).
"""

from __future__ import annotations

from importlib import resources

from privml.study._spec import StudySpec
from privml.study._spec_file import load_spec


def preset_names() -> list[str]:
    """Names of the built-in studies."""
    return sorted(p.name[: -len(".toml")] for p in resources.files(__name__).iterdir() if p.name.endswith(".toml"))


def load_preset(name: str) -> StudySpec:
    """The built-in study ``name``.

    Raises
    ------
    ValueError
        If there is no such preset (the message lists them).
    """
    if name not in preset_names():
        raise ValueError(f"unknown study preset {name!r}; presets are {', '.join(preset_names())}")
    with resources.as_file(resources.files(__name__) / f"{name}.toml") as path:
        return load_spec(path)
