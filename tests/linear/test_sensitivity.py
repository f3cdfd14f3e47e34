"""Tests for the sensitivities and objective-perturbation constants (replace-one)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privml.accounting._analytic_gaussian import analytic_gaussian_sigma
from privml.linear._objective_perturbation_constants import (
    cms11_constants,
    gradient_directions,
    hessian_trace_bound,
    jacobian_epsilon,
    jacobian_strong_convexity,
    kst12_constants,
    objective_gaussian_sigma,
)
from privml.linear._sensitivity import auto_l2, erm_sensitivity, l2_for_noise
from privml.linear._solvers import minimise_objective
from privml.losses import HuberHingeLoss, LogisticLoss, MultinomialLogisticLoss, RegularisedObjective, SquaredLoss


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(0.2, 1.0, size=(n, 1))


# ------------------------------------------------------------ erm_sensitivity
def test_erm_sensitivity_formula() -> None:
    assert erm_sensitivity(1.0, 1000, 0.01) == pytest.approx(0.2)
    assert erm_sensitivity(math.sqrt(2), 500, 0.1) == pytest.approx(2 * math.sqrt(2) / 50)
    # An approximate minimiser within tol/lambda of the exact one on each side.
    assert erm_sensitivity(1.0, 1000, 0.01, grad_tol=1e-6) == pytest.approx(0.2 + 2e-4)


@pytest.mark.parametrize(
    "args", [(0.0, 10, 0.1), (1.0, 0, 0.1), (1.0, 10, 0.0), (1.0, 10, -1.0), (math.inf, 10, 0.1)]
)
def test_erm_sensitivity_rejects_bad_arguments(args: tuple) -> None:
    with pytest.raises(ValueError):
        erm_sensitivity(*args)


def test_erm_sensitivity_is_attained_by_the_huber_hinge() -> None:
    # With a strong regulariser every margin stays below 1 - h, where the Huber
    # hinge is linear (phi' = -1): replacing (x, y) by (x, -y) then moves the
    # minimiser by exactly 2 / (n lambda). A bound of L / (n lambda) (one
    # gradient, the add/remove shift) would be violated.
    rng = np.random.default_rng(0)
    n, lam = 5, 10.0
    X = _unit_rows(rng, n, 3)
    X[0] /= np.linalg.norm(X[0])
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
    y_neighbour = y.copy()
    y_neighbour[0] = -y[0]
    loss = HuberHingeLoss(0.5)
    w = minimise_objective(RegularisedObjective(loss, X, y, lam)).weights
    w_neighbour = minimise_objective(RegularisedObjective(loss, X, y_neighbour, lam)).weights
    assert np.max(np.abs(X @ w)) < 0.5
    assert np.linalg.norm(w - w_neighbour) == pytest.approx(erm_sensitivity(1.0, n, lam), rel=1e-9)


@pytest.mark.parametrize("loss", [LogisticLoss(), MultinomialLogisticLoss(4)], ids=["logistic", "multinomial"])
def test_erm_sensitivity_bounds_random_replacements(loss) -> None:
    rng = np.random.default_rng(1)
    n, d, lam = 8, 3, 0.05
    worst = 0.0
    for _ in range(20):
        X = _unit_rows(rng, n, d)
        labels = rng.integers(0, 4, size=n) if loss.n_outputs else rng.choice([-1.0, 1.0], size=n)
        X2, labels2 = X.copy(), labels.copy()
        replacement = rng.standard_normal(d)
        X2[0] = replacement / np.linalg.norm(replacement)
        labels2[0] = rng.integers(0, 4) if loss.n_outputs else -labels[0]
        w = minimise_objective(RegularisedObjective(loss, X, labels, lam)).weights
        w2 = minimise_objective(RegularisedObjective(loss, X2, labels2, lam)).weights
        worst = max(worst, float(np.linalg.norm(w - w2)))
    assert worst <= erm_sensitivity(loss.lipschitz, n, lam)


def test_l2_for_noise_inverts_the_sensitivity() -> None:
    lam = l2_for_noise(math.sqrt(2), 60_000, 3.7, 0.25)
    assert 3.7 * erm_sensitivity(math.sqrt(2), 60_000, lam) == pytest.approx(0.25)


def test_auto_l2_is_the_noise_target_floored_at_one_over_n() -> None:
    # The one l2="auto" rule: max(1/n, 2 L m / (n tau)).
    assert auto_l2(60_000, math.sqrt(2), 3.7, 0.25) == l2_for_noise(math.sqrt(2), 60_000, 3.7, 0.25)
    assert auto_l2(1000, 1.0, 2.0, 0.25) == pytest.approx(2 * 2.0 / (1000 * 0.25))
    assert auto_l2(1000, 1.0, 1e-3, 0.25) == 1 / 1000  # little noise: scikit-learn's default
    assert auto_l2(1000, 1.0, 0.2, 0.25) > auto_l2(1000, 1.0, 0.1, 0.25)  # grows with the noise
    with pytest.raises(ValueError, match="n"):
        auto_l2(0, 1.0, 1.0, 0.25)


# ------------------------------------------------------------------- CMS11
def test_cms11_constants_without_extra_regularisation() -> None:
    # SPEC: eps' = eps - log(1 + 2c/(n lambda) + c^2/(n lambda)^2) > 0 -> Delta = 0.
    eps, n, lam, c = 1.0, 1000, 0.01, 0.25
    constants = cms11_constants(eps, n, lam, c)
    expected = eps - math.log(1 + 2 * c / (n * lam) + c**2 / (n * lam) ** 2)
    assert constants.epsilon_noise == pytest.approx(expected, rel=1e-12)
    assert constants.extra_l2 == 0.0
    # b ~ exp(-(eps'/2)||b||): L2-Laplace with scale 2 / eps'.
    assert constants.noise == "l2-laplace"
    assert constants.noise_scale == pytest.approx(2 / expected, rel=1e-12)
    assert constants.noise_sensitivity == 2.0


def test_cms11_constants_with_extra_regularisation() -> None:
    # SPEC: eps' <= 0 -> Delta = c / (n (e^(eps/4) - 1)) - lambda and eps' = eps / 2.
    eps, n, lam, c = 0.5, 10, 0.01, 0.25
    assert eps - math.log(1 + 2 * c / (n * lam) + c**2 / (n * lam) ** 2) <= 0
    constants = cms11_constants(eps, n, lam, c)
    assert constants.extra_l2 == pytest.approx(c / (n * (math.exp(eps / 4) - 1)) - lam, rel=1e-12)
    assert constants.epsilon_noise == pytest.approx(eps / 2)
    assert constants.noise_scale == pytest.approx(2 / (eps / 2))
    # With lambda + Delta the CMS11 Jacobian term is exactly eps / 2.
    assert constants.epsilon_jacobian == pytest.approx(eps / 2, rel=1e-12)


def test_cms11_constants_validation() -> None:
    with pytest.raises(ValueError):
        cms11_constants(0.0, 10, 0.1, 0.25)
    with pytest.raises(ValueError):
        cms11_constants(1.0, 10, 0.0, 0.25)


# ------------------------------------------------------------ Jacobian bound
def test_jacobian_epsilon_by_hand() -> None:
    # r log(1 + min(beta, t/r) / (n Lambda)); multinomial k = 10: r = 9, beta = 1/2, t = 9/10.
    assert jacobian_epsilon(1000, 0.01, 0.25, 1, 0.25) == pytest.approx(math.log(1.025), rel=1e-12)
    assert jacobian_epsilon(60_000, 3e-4, 0.5, 9, 0.9) == pytest.approx(9 * math.log1p(0.1 / 18), rel=1e-12)
    # Without the trace bound (t = r beta) the rank term is the vdMH20 one.
    assert jacobian_epsilon(60_000, 3e-4, 0.5, 9, 4.5) == pytest.approx(9 * math.log1p(0.5 / 18), rel=1e-12)


@pytest.mark.parametrize("eps_j, r, beta, t", [(0.5, 1, 0.25, 0.25), (0.05, 9, 0.5, 0.9), (2.0, 3, 0.5, 0.75)])
def test_jacobian_strong_convexity_inverts_jacobian_epsilon(eps_j: float, r: int, beta: float, t: float) -> None:
    lam = jacobian_strong_convexity(eps_j, 500, beta, r, t)
    assert jacobian_epsilon(500, lam, beta, r, t) == pytest.approx(eps_j, rel=1e-12)
    assert jacobian_epsilon(500, 2 * lam, beta, r, t) < eps_j


def _scaled_hessian(loss, X: np.ndarray, y: np.ndarray, strong_convexity: float, w: np.ndarray) -> np.ndarray:
    """The Jacobian of b -> w up to sign: n times the Hessian of J (the objective times n)."""
    return X.shape[0] * RegularisedObjective(loss, X, y, strong_convexity).hessian(w)


def test_jacobian_bound_holds_for_random_neighbours() -> None:
    rng = np.random.default_rng(2)
    k, d, n, lam = 4, 3, 6, 0.02
    loss = MultinomialLogisticLoss(k)
    bound = jacobian_epsilon(n, lam, loss.smoothness, loss.hessian_rank, hessian_trace_bound(loss))
    worst = 0.0
    for _ in range(200):
        X = _unit_rows(rng, n, d)
        y = rng.integers(0, k, size=n)
        X2, y2 = X.copy(), y.copy()
        X2[0], y2[0] = _unit_rows(rng, 1, d)[0], rng.integers(0, k)
        w = rng.standard_normal(d * k) * rng.uniform(0, 3)
        _, logdet = np.linalg.slogdet(_scaled_hessian(loss, X, y, lam, w))
        _, logdet2 = np.linalg.slogdet(_scaled_hessian(loss, X2, y2, lam, w))
        worst = max(worst, abs(logdet - logdet2))
    assert worst <= bound


def test_jacobian_bound_is_attained() -> None:
    # Tight case: other records carry no curvature (x = 0), the replaced record
    # has x of norm 1 at uniform probabilities (W = 0), its replacement x' = 0.
    # Then the log-det ratio is (k - 1) log(1 + (1/k)/(n Lambda)) exactly; the
    # looser rank * smoothness bound would overstate it, a smaller one fail.
    k, d, n, lam = 5, 2, 4, 0.1
    loss = MultinomialLogisticLoss(k)
    X = np.zeros((n, d))
    X[0] = [0.6, 0.8]
    y = np.zeros(n, dtype=int)
    w = np.zeros(d * k)
    _, logdet = np.linalg.slogdet(_scaled_hessian(loss, X, y, lam, w))
    _, logdet2 = np.linalg.slogdet(_scaled_hessian(loss, np.zeros((n, d)), y, lam, w))
    bound = jacobian_epsilon(n, lam, loss.smoothness, loss.hessian_rank, hessian_trace_bound(loss))
    assert logdet - logdet2 == pytest.approx(bound, rel=1e-10)


def test_hessian_trace_bound() -> None:
    rng = np.random.default_rng(3)
    for k in (2, 3, 10):
        loss = MultinomialLogisticLoss(k)
        t = hessian_trace_bound(loss)
        assert t == pytest.approx(1 - 1 / k)
        for _ in range(50):
            x = _unit_rows(rng, 1, 4)
            W = rng.standard_normal((4, k)) * 3
            assert np.trace(loss._hessian(W, x, np.array([0]))) <= t + 1e-12
        # Uniform probabilities and ||x|| = 1 attain it.
        x = np.array([[1.0, 0.0, 0.0, 0.0]])
        assert np.trace(loss._hessian(np.zeros((4, k)), x, np.array([0]))) == pytest.approx(t)
    assert hessian_trace_bound(LogisticLoss()) == 0.25
    assert hessian_trace_bound(HuberHingeLoss(0.25)) == 2.0
    assert hessian_trace_bound(SquaredLoss()) == 1.0  # generic rank * smoothness


def test_gradient_directions_hold_every_gradient() -> None:
    # Every gradient of a record is a convex combination of 0 and g fixed
    # vectors of norm <= L, so b.grad <= max_j (b.G_j)^+ for any b.
    rng = np.random.default_rng(4)
    k = 5
    multinomial = MultinomialLogisticLoss(k)
    assert gradient_directions(multinomial) == k - 1
    assert gradient_directions(LogisticLoss()) == 1
    assert gradient_directions(HuberHingeLoss()) == 1
    x = _unit_rows(rng, 1, 3)
    for y in range(k):
        vertices = [np.outer(x[0], np.eye(k)[c] - np.eye(k)[y]).ravel() for c in range(k) if c != y]
        assert len(vertices) == gradient_directions(multinomial)
        assert max(np.linalg.norm(v) for v in vertices) <= multinomial.lipschitz
        for _ in range(20):
            W = rng.standard_normal((3, k)) * 2
            grad = multinomial.per_example_gradients(W, x, [y])[0]
            b = rng.standard_normal(3 * k)
            assert b @ grad <= max(0.0, max(b @ v for v in vertices)) + 1e-12
    for loss in (LogisticLoss(), HuberHingeLoss(0.5)):
        for label in (-1.0, 1.0):
            vertex = -label * x[0] * loss.lipschitz
            for _ in range(20):
                grad = loss.per_example_gradients(rng.standard_normal(3) * 3, x, [label])[0]
                t = grad @ vertex / (vertex @ vertex)
                assert np.allclose(grad, t * vertex) and -1e-12 <= t <= 1 + 1e-12
    with pytest.raises(TypeError):
        gradient_directions(SquaredLoss())


# ----------------------------------------------------- Gaussian calibration
def test_objective_gaussian_sigma_is_analytic_gaussian_at_delta_over_2g() -> None:
    expected = analytic_gaussian_sigma(1.0, 1e-5 / 18, 2 * math.sqrt(2))
    assert objective_gaussian_sigma(1.0, 1e-5, math.sqrt(2), 9) == expected
    with pytest.raises(ValueError):
        objective_gaussian_sigma(1.0, 0.0, 1.0, 1)


def test_union_bound_covers_an_adversarial_shift_and_is_needed() -> None:
    # The lemma behind objective_gaussian_sigma: for ANY choice of the shift
    # s(b) in conv(G) - conv(G'), here the worst one for each b (a vertex), the
    # hockey-stick divergence stays below delta. Calibrating as if s were
    # fixed (the plain analytic Gaussian) is not enough against such shifts.
    k, d, eps, delta, n_samples = 10, 2, 1.0, 0.01, 100_000
    lipschitz = math.sqrt(2)
    eye = np.eye(k)

    def vertices(x: np.ndarray, y: int) -> list[np.ndarray]:
        return [np.zeros(d * k)] + [np.outer(x, eye[c] - eye[y]).ravel() for c in range(k) if c != y]

    shifts = np.array(
        [g - h for g, h in itertools.product(vertices(np.array([1.0, 0.0]), 0), vertices(np.array([0.0, 1.0]), 0))]
    )
    rng = np.random.default_rng(5)

    def divergence(sigma: float) -> float:
        b = rng.normal(0.0, sigma, size=(n_samples, d * k))
        loss = ((2 * b @ shifts.T + (shifts**2).sum(axis=1)) / (2 * sigma**2)).max(axis=1)
        return float(np.mean(np.maximum(0.0, -np.expm1(eps - loss))))

    assert divergence(objective_gaussian_sigma(eps, delta, lipschitz, k - 1)) < delta
    assert divergence(analytic_gaussian_sigma(eps, delta, 2 * lipschitz)) > 1.3 * delta


# ----------------------------------------------------------------- KST12
def test_kst12_constants_by_hand_pure() -> None:
    n, lam, eps = 1000, 0.01, 1.0
    constants = kst12_constants(
        eps, 0.0, n, lam, lipschitz=1.0, smoothness=0.25, rank=1, trace=0.25, directions=1
    )
    eps_j = math.log(1 + 0.25 / (n * lam))
    assert constants.extra_l2 == 0.0
    assert constants.epsilon_jacobian == pytest.approx(eps_j, rel=1e-12)
    assert constants.epsilon_noise == pytest.approx(eps - eps_j, rel=1e-12)
    # b ~ exp(-eps_b ||b|| / (2L)): sensitivity 2L under replace-one.
    assert constants.noise == "l2-laplace"
    assert constants.noise_scale == pytest.approx(2.0 / (eps - eps_j), rel=1e-12)
    assert constants.noise_sensitivity == 2.0


def test_kst12_constants_by_hand_gaussian_with_extra_regularisation() -> None:
    # Multinomial, k = 10, MNIST size, small lambda: Delta tops Lambda up to
    # the value where the Jacobian uses exactly eps / 2.
    n, lam, eps, delta, k = 60_000, 1e-6, 0.5, 1e-5, 10
    constants = kst12_constants(
        eps, delta, n, lam, lipschitz=math.sqrt(2), smoothness=0.5, rank=k - 1, trace=1 - 1 / k, directions=k - 1
    )
    a = min(0.5, (1 - 1 / k) / (k - 1))
    assert a == pytest.approx(1 / k)
    total = a / (n * math.expm1(eps / 2 / (k - 1)))
    assert constants.extra_l2 == pytest.approx(total - lam, rel=1e-12)
    assert constants.epsilon_jacobian == pytest.approx(eps / 2, rel=1e-10)
    assert constants.epsilon_noise == pytest.approx(eps / 2, rel=1e-10)
    expected_sigma = analytic_gaussian_sigma(constants.epsilon_noise, delta / (2 * (k - 1)), 2 * math.sqrt(2))
    assert constants.noise == "gaussian"
    assert constants.noise_scale == pytest.approx(expected_sigma, rel=1e-12)
    assert constants.epsilon_jacobian + constants.epsilon_noise == pytest.approx(eps, rel=1e-12)


def test_kst12_uses_less_noise_than_the_reference_code_under_its_own_budget() -> None:
    # facebookresearch/private_prediction: sigma = L sqrt(8 ln(2/delta) + 4 eps) / eps and
    # lambda >= 2 * 0.5 * k / (eps n), valid for add/remove only. At that lambda,
    # the replace-one calibration here is still less noisy on MNIST.
    n, eps, delta, k = 60_000, 1.0, 1e-5, 10
    reference_lambda = 2 * 0.5 * k / (eps * n)
    reference_sigma = math.sqrt(2) * math.sqrt(8 * math.log(2 / delta) + 4 * eps) / eps
    ours = kst12_constants(
        eps, delta, n, reference_lambda, lipschitz=math.sqrt(2), smoothness=0.5, rank=k - 1,
        trace=1 - 1 / k, directions=k - 1,
    )
    assert ours.extra_l2 == 0.0 and ours.epsilon_jacobian < 0.1
    assert ours.noise_scale < reference_sigma


def test_kst12_constants_validation() -> None:
    common = dict(lipschitz=1.0, smoothness=0.25, rank=1, trace=0.25, directions=1)
    with pytest.raises(ValueError):
        kst12_constants(1.0, 1.0, 100, 0.1, **common)
    with pytest.raises(ValueError):
        kst12_constants(-1.0, 0.0, 100, 0.1, **common)
    with pytest.raises(ValueError):
        kst12_constants(1.0, 0.0, 100, 0.1, jacobian_share=1.0, **common)
