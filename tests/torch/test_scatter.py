"""ScatterNet features (privml.torch._scatter) against a direct float64 computation, and their cache."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privml.torch._scatter import (  # noqa: E402
    Scattering2D,
    cached_features,
    low_pass,
    n_coefficients,
    output_side,
    padded_side,
    wavelets,
)


def circulant(kernel: np.ndarray) -> np.ndarray:
    """The matrix of the circular convolution with ``kernel``: ``(C x)[p] = sum_u x[u] kernel[(p - u) mod]``."""
    M, N = kernel.shape
    p0, p1, u0, u1 = np.meshgrid(np.arange(M), np.arange(N), np.arange(M), np.arange(N), indexing="ij")
    return kernel[(p0 - u0) % M, (p1 - u1) % N].reshape(M * N, M * N)


def reference(image: np.ndarray, J: int = 2, L: int = 8) -> dict[tuple, np.ndarray]:
    """Selected coefficient maps of one image, in float64 by direct convolution sums (no FFT, no product trick)."""
    H, W = image.shape
    M, N = padded_side(H, J), padded_side(W, J)
    top, left = (M - H) // 2, (N - W) // 2
    padded = np.pad(image.astype(np.float64), ((top, M - H - top), (left, N - W - left)), mode="reflect")
    waves = wavelets((M, N), J=J, L=L)
    low = circulant(low_pass((M, N), J=J))
    step = 2**J
    h, w = output_side(H, J), output_side(W, J)

    def average(u: np.ndarray) -> np.ndarray:  # low-pass, then the grid points 2^J (a + 1, b + 1)
        full = (low @ u.ravel()).reshape(M, N)
        return full[step : step * (h + 1) : step, step : step * (w + 1) : step]

    out = {("order0",): average(padded)}
    for j1, t1 in [(0, 0), (0, 3), (1, 5)]:
        first = np.abs(circulant(waves[j1 * L + t1]) @ padded.ravel())
        out[("order1", j1, t1)] = average(first)
        if j1 == 0:
            for t2 in (0, 6):
                second = np.abs(circulant(waves[L + t2]) @ first)
                out[("order2", t1, t2)] = average(second)
    return out


def index_of(key: tuple, J: int = 2, L: int = 8) -> int:
    """Where ``key`` sits among the K coefficients (order 0, order 1 by scale and angle, order 2; J = 2)."""
    if key[0] == "order0":
        return 0
    if key[0] == "order1":
        return 1 + key[1] * L + key[2]
    return 1 + J * L + key[1] * L + key[2]


@pytest.mark.parametrize("shape", [(28, 28), (20, 24)])
def test_transform_matches_direct_convolution(shape):
    rng = np.random.default_rng(3)
    image = rng.uniform(0, 1, shape)
    image[4:12, 6:10] += 2.0  # an edge, so that the oriented coefficients differ
    features = Scattering2D(shape)(torch.from_numpy(image[None, None]).float())[0].double().numpy()
    expected = reference(image)
    for key, value in expected.items():
        got = features[index_of(key)]
        assert got.shape == value.shape
        # float32 FFTs against float64 sums: a relative error of order 1e-6; 1e-4 of the map's largest value
        assert np.max(np.abs(got - value)) <= 1e-4 * np.max(np.abs(value)), key


def test_shapes_and_channels():
    assert n_coefficients(2, 8) == 81
    assert output_side(28, 2) == 7 and output_side(32, 2) == 8
    grey = Scattering2D((28, 28))(torch.zeros(3, 1, 28, 28))
    assert tuple(grey.shape) == (3, 81, 7, 7)
    net = Scattering2D((32, 32))
    rgb = torch.rand(2, 3, 32, 32)
    colour = net(rgb)
    assert tuple(colour.shape) == (2, 243, 8, 8)
    # each channel is transformed alone: the second channel's features are those of that channel as an image
    alone = net(rgb[:, 1:2])
    assert torch.allclose(colour[:, 81:162], alone, rtol=1e-5, atol=1e-6)
    assert tuple(net(torch.zeros(0, 3, 32, 32)).shape) == (0, 243, 8, 8)


def test_filters():
    waves = wavelets((36, 36), J=2, L=8)
    assert np.max(np.abs(waves.sum(axis=(1, 2)))) < 1e-12  # Morlet: zero mean
    assert math.isclose(low_pass((36, 36), J=2).sum(), 1.0, rel_tol=1e-6)
    spectra = np.fft.fft2(waves)
    assert np.max(np.abs(spectra.imag)) < 1e-9 * np.max(np.abs(spectra.real))
    # a constant image: order 0 is the constant, every wavelet coefficient is zero
    features = Scattering2D((28, 28))(torch.full((1, 1, 28, 28), 2.0))[0]
    assert torch.allclose(features[0], torch.full((7, 7), 2.0), rtol=1e-5)
    assert float(features[1:].abs().max()) < 1e-4


def test_refuses_bad_inputs():
    with pytest.raises(ValueError, match="at least 8 pixels"):
        Scattering2D((6, 28))
    with pytest.raises(ValueError, match="expected images"):
        Scattering2D((28, 28))(torch.zeros(2, 28, 28))


def test_cache_round_trip(tmp_path):
    net = Scattering2D((16, 16))
    images = torch.rand(5, 1, 16, 16)
    first = cached_features(images, net, cache_dir=tmp_path)
    files = list((tmp_path / "features").glob("*.npy"))
    assert len(files) == 1 and "cpu" in files[0].name
    again = cached_features(images, net, cache_dir=tmp_path)
    assert torch.equal(first, again)
    # other images get their own file; a damaged file is recomputed, not trusted
    cached_features(images + 1, net, cache_dir=tmp_path)
    assert len(list((tmp_path / "features").glob("*.npy"))) == 2
    files[0].write_bytes(b"not an array")
    assert torch.equal(cached_features(images, net, cache_dir=tmp_path), first)
    np.save(files[0], np.zeros((4, 81, 4, 4), dtype=np.float32))  # readable, but of another shape
    assert torch.equal(cached_features(images, net, cache_dir=tmp_path), first)
