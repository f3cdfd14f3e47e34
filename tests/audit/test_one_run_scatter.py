"""One-run audits of a ScatterClassifier fit: the head reads features, the run releases the private feature mean
and applies the weight average as a fit does, the claim composes the mean with the steps, a leaky run is flagged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privml.accounting._dpsgd import dpsgd_accountant  # noqa: E402
from privml.audit import _one_run_torch as ort  # noqa: E402
from privml.audit._one_run_fdp import accountant_profile  # noqa: E402
from privml.torch._dpsgd import DPSGD  # noqa: E402
from privml.torch._feature_mean import FeatureCentre  # noqa: E402
from privml.torch._scatter_classifier import ScatterClassifier, _WeightAverage  # noqa: E402

FEATURES = (81, 4, 4)  # J = 2, L = 8 on 16 x 16 grey images


def blobs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two classes: a bright block top-left or bottom-right, plus noise (16 x 16, one channel)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.normal(0, 0.3, (n, 1, 16, 16)).astype(np.float32)
    X[y == 0, :, :8, :8] += 1.5
    X[y == 1, :, 8:, 8:] += 1.5
    return X, y


def small(**kwargs) -> ScatterClassifier:
    # an explicit centring noise multiplier: "auto" does not centre below 3,600 records for these features
    settings = {"epsilon": 8.0, "input_shape": (1, 16, 16), "classes": [0, 1], "epochs": 2, "batch_size": 50,
                "learning_rate": 2.0, "clip_norm": 1.0, "centering": 2.0, "averaging": 0.9, "random_state": 0,
                "device": "cpu", "threads": 1}
    return ScatterClassifier(**{**settings, **kwargs})


class _Spy:
    """Records what the audit's run hands the head and the release, through the estimator's own methods."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.step_shapes: set[tuple[int, ...]] = set()
        self.releases: list[tuple[torch.Tensor, int]] = []
        self.centres: list[torch.Tensor] = []
        self.averages_applied = 0
        step, release, apply = DPSGD.step, ScatterClassifier._release_preceding, _WeightAverage.apply

        def spy_step(engine, x, y):
            self.step_shapes.add(tuple(x.shape[1:]))
            return step(engine, x, y)

        def spy_release(est, engine, X, n):
            self.releases.append((X.clone(), n))
            release(est, engine, X, n)
            centre = next(m for m in engine.module.modules() if isinstance(m, FeatureCentre))
            self.centres.append(centre.mean.clone())

        def spy_apply(average):
            self.averages_applied += 1
            return apply(average)

        monkeypatch.setattr(DPSGD, "step", spy_step)
        monkeypatch.setattr(ScatterClassifier, "_release_preceding", spy_release)
        monkeypatch.setattr(_WeightAverage, "apply", spy_apply)


@pytest.mark.parametrize("white_box", [True, False])
def test_the_audit_runs_the_scatter_fit_on_features(white_box, monkeypatch):
    X, y = blobs(160)
    m = 40
    spy = _Spy(monkeypatch)
    result = ort.torch_classifier_one_run_audit(small(), X, y, m=m, white_box=white_box, random_state=0)
    # the head read features (raw 1 x 16 x 16 images would not even fit the linear head's 1,296 inputs)
    assert spy.step_shapes == {FEATURES}
    assert result.n_train == 200 and result.canaries == ("dirac" if white_box else "records")
    # the feature mean was released once, over the run's n + m slots, before the steps; the average was applied
    assert len(spy.releases) == 1 and spy.averages_applied == 1
    released, n = spy.releases[0]
    assert n == 200 and tuple(released.shape[1:]) == FEATURES
    features = small().transform(X)
    assert torch.equal(released[:160], features)
    if white_box:  # gradient canaries have no features: only the real records are rows of the release
        assert released.shape[0] == 160
    else:  # the included canaries' features, and zero (a null record) in an excluded canary's slot
        assert released.shape[0] == 200
        canaries = released[160:].reshape(m, -1)
        present = canaries.norm(dim=1) > 0
        np.testing.assert_array_equal(present.numpy(), result.included)
        assert 0 < int(present.sum()) < m
    assert float(spy.centres[0].abs().max()) > 0
    # the claim is what a fit on n + m records states: the mean composed with the steps
    reference = small().fit(np.concatenate([X, X[:m]]), np.concatenate([y, y[:m]]))
    assert result.audit.claimed_epsilon == pytest.approx(reference.privacy_.epsilon)
    assert result.noise_multiplier == pytest.approx(reference.fit_info_["noise_multiplier"])
    assert result.steps == reference.fit_info_["steps"]
    assert not result.audit.exceeds_claim, result.to_dict()


def test_null_slots_add_nothing_to_the_released_mean():
    # The release over n slots of which len(X) hold records is the fit's release on X padded with zero rows.
    est = small(batch_size=20)
    X = est.transform(blobs(30)[0])
    padded = torch.cat([X, torch.zeros((10, *FEATURES))])
    means = []
    for rows, n in ((X, 40), (padded, 40)):
        module = est._build(2)
        engine = est._engine(module, torch.optim.SGD(module.parameters(), lr=1.0), n, torch.device("cpu"))
        est._release_preceding(engine, rows, n)
        means.append(module[0].mean.clone())
    assert torch.equal(means[0], means[1]) and float(means[0].abs().max()) > 0


def test_the_claimed_profile_composes_the_feature_mean():
    # claimed_profile reads the engine's plan, whose events start with the mean's: without it the curve would
    # state a stronger guarantee than the fit's (a less conservative audit).
    est = small(epsilon=None, noise_multiplier=1.5)
    module = est._build(2)
    engine = est._engine(module, torch.optim.SGD(module.parameters(), lr=1.0), 200, torch.device("cpu"))
    engine.steps_taken = engine.plan.steps  # the profile after the whole run (no step needs to be taken)
    assert engine.plan.preceding is not None
    with_mean = ort.claimed_profile(engine)
    plan = dataclasses.replace(engine.plan, preceding=None)
    factory = dpsgd_accountant(plan.accountant, neighbouring=plan.neighbouring, replace_one_bound=plan.bound)
    steps_only = factory().compose(plan.event_after(engine.steps_taken))
    without = accountant_profile(steps_only, epsilon_max=max(4.0 * engine.privacy_.epsilon, 1.0))
    ys = np.linspace(0.01, 0.5, 20)
    assert all(with_mean(v) <= without(v) + 1e-12 for v in ys)
    assert any(with_mean(v) < without(v) - 1e-6 for v in ys)


def test_a_quiet_scatter_run_is_flagged(monkeypatch):
    # The planted bug: the engine claims its calibrated noise but draws a millionth of it.
    draw = DPSGD._draw_noise
    monkeypatch.setattr(DPSGD, "_draw_noise", lambda engine: [n * 1e-6 for n in draw(engine)])
    X, y = blobs(160)
    result = ort.torch_classifier_one_run_audit(small(epsilon=2.0, epochs=4), X, y, m=200, white_box=True,
                                                random_state=0)
    assert result.audit.exceeds_claim, result.to_dict()
