"""privml.registry is the one list of methods: io, loading, the CLI and the study all cover every entry."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from privml import registry
from privml.io import MODEL_CLASSES, load_model, save_model
from privml.prediction._loading import PREDICTION_METHODS, PRIVATE_TRAINING_METHODS
from tests.test_release_invariance import _data_for, _make


def _resolve(target: str) -> type:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", list(registry.METHODS))
def test_each_entry_names_its_class_and_what_it_releases(name: str) -> None:
    spec = registry.METHODS[name]
    if spec.target.startswith("privml.torch."):
        pytest.importorskip("torch")
    cls = registry.estimator_class(name)
    # TorchClassifier's method is its instance's (dpsgd-cnn, or nonprivate-cnn at epsilon = inf): ask a fitted one
    assert (_make(name, 0).method if isinstance(cls.__dict__.get("method"), property) else cls.method) == name
    assert isinstance(cls.released_info, frozenset)  # the allow-list privml.io enforces
    assert (spec.neighbouring is None) == (spec.kind is registry.Kind.BASELINE)
    assert spec.dp_fields or spec.secret_fields


def test_io_and_loading_cover_every_entry() -> None:
    assert MODEL_CLASSES == {name: spec.target for name, spec in registry.METHODS.items()}
    served = set(PREDICTION_METHODS) | set(PRIVATE_TRAINING_METHODS) | {"nonprivate", "nonprivate-cnn"}
    assert served == set(registry.METHODS)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", list(registry.METHODS))
def test_every_method_saves_and_loads(name: str, tmp_path) -> None:
    X, y, _, _ = _data_for(name)
    model = _make(name, 0).fit(X, y)
    loaded = load_model(save_model(model, tmp_path / f"{name}.npz"))
    assert type(loaded) is type(model) and loaded.privacy_ == model.privacy_
    if registry.METHODS[name].kind is not registry.Kind.PRIVATE_PREDICTION:  # predictors answer with fresh noise
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_the_cli_and_the_study_use_registered_methods() -> None:
    from privml.cli._train import TRAIN_METHODS
    from privml.cli.main import _subparser, build_parser
    from privml.study._methods import METHODS as STUDY

    assert set(TRAIN_METHODS) <= set(registry.METHODS)
    parser = build_parser(["predict", "serve"])
    for command in ("predict", "serve"):
        method = next(a for a in _subparser(parser, (command,))._actions if a.dest == "method")
        assert set(method.choices) == set(PREDICTION_METHODS) == set(registry.names_of_kind(
            registry.Kind.PRIVATE_PREDICTION))
    registered = {_resolve(spec.target) for spec in registry.METHODS.values()
                  if not spec.target.startswith("privml.torch.") or importlib.util.find_spec("torch")}
    for method in STUDY.values():
        if method.unavailable_reason() is None:
            assert _resolve(method.target) in registered, f"study method {method.name} is not in privml.registry"
