"""ScatterNet features: the 2-D scattering transform of Oyallon and Mallat (2015), written once in torch.

A scattering network is a fixed cascade of wavelet convolutions and complex
moduli, averaged by a Gaussian low-pass filter (Mallat 2012; Bruna and
Mallat 2013). With J scales and L orientations, the second-order transform
of one image channel is

- order 0: ``x * phi_J``;
- order 1: ``|x * psi_{j1,t1}| * phi_J`` for the J L wavelets;
- order 2: ``||x * psi_{j1,t1}| * psi_{j2,t2}| * phi_J`` for ``j1 < j2``;

each sampled every ``2**J`` pixels: ``1 + J L + L^2 J (J - 1) / 2``
coefficients per channel and position, 81 for J = 2 and L = 8, on a
``ceil(H / 4) x ceil(W / 4)`` grid (7 x 7 on 28 x 28 images, 8 x 8 on 32 x 32).
Tramer and Boneh (ICLR 2021, "Differentially private learning needs better
features (or much more data)") train private linear models and small CNNs
on these features, with J = 2, L = 8.

The filters are Morlet wavelets (Gabor functions minus a multiple of their
Gaussian envelope so that they have zero mean) at width ``0.8 * 2**j``,
centre frequency ``(3 pi / 4) / 2**j``, slant ``4 / L``, and a Gaussian
low-pass filter at width ``0.8 * 2**(J - 1)``: the filter bank of Oyallon
and Mallat as kymatio builds it, which Tramer and Boneh used. Wavelet
convolutions are circular, by FFT, on the image reflected outwards to a
multiple of ``2**J`` with at least ``2**J`` pixels each side, and every
modulus is taken at full resolution (no intermediate subsampling, hence no
aliasing, unlike kymatio: the features agree with its to a few per cent);
the final averages are computed only at the output positions.

The transform is public and data-independent (it has no parameters and
learns nothing), so features cost no privacy by themselves; the features of
private images are private data like the images, and a cache of them stays
with the data (:func:`cached_features`).
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from privml.data._cache import resolve_cache_dir

__all__ = [
    "Scattering2D", "averaging_matrix", "cached_features", "gabor_2d", "low_pass", "morlet_2d", "n_coefficients",
    "output_side", "padded_side", "wavelets",
]


def n_coefficients(J: int, L: int) -> int:
    """Coefficients per input channel and output position: ``1 + J L + L^2 J (J - 1) / 2``."""
    return 1 + J * L + L * L * J * (J - 1) // 2


def padded_side(side: int, J: int) -> int:
    """The side the image is reflected out to: a multiple of ``2**J`` with at least ``2**J`` pixels each side."""
    step = 2**J
    return step * (math.ceil(side / step) + 2)


def output_side(side: int, J: int) -> int:
    """Positions along one side of the features: ``ceil(side / 2**J)`` (7 for 28 and J = 2, 8 for 32)."""
    return padded_side(side, J) // 2**J - 2


def gabor_2d(shape: tuple[int, int], *, sigma: float, theta: float, xi: float, slant: float) -> np.ndarray:
    """A Gabor filter on the periodic ``shape`` grid, centred at pixel (0, 0), in float64 (complex).

    ``exp(-u' A u) exp(i xi (u_0 cos theta + u_1 sin theta))`` with ``A = R diag(1, slant^2) R' / (2 sigma^2)``
    (R the rotation by theta), summed over the grid's periodic copies within two periods (periodisation; the
    tails beyond are below float64's precision at the widths used here), divided by ``2 pi sigma^2 / slant``.
    """
    M, N = shape
    rotation = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    A = rotation @ np.diag([1.0, slant**2]) @ rotation.T / (2 * sigma**2)
    out = np.zeros(shape, dtype=np.complex128)
    for shift_x in range(-2, 3):
        for shift_y in range(-2, 3):
            u0, u1 = np.meshgrid(np.arange(M) + shift_x * M, np.arange(N) + shift_y * N, indexing="ij")
            envelope = np.exp(-(A[0, 0] * u0**2 + (A[0, 1] + A[1, 0]) * u0 * u1 + A[1, 1] * u1**2))
            out += envelope * np.exp(1j * xi * (u0 * math.cos(theta) + u1 * math.sin(theta)))
    return out / (2 * math.pi * sigma**2 / slant)


def morlet_2d(shape: tuple[int, int], *, sigma: float, theta: float, xi: float, slant: float) -> np.ndarray:
    """A Morlet wavelet: the Gabor filter minus the multiple of its envelope that makes its sum zero."""
    wave = gabor_2d(shape, sigma=sigma, theta=theta, xi=xi, slant=slant)
    envelope = gabor_2d(shape, sigma=sigma, theta=theta, xi=0.0, slant=slant)
    return wave - envelope * (wave.sum() / envelope.sum())


def low_pass(shape: tuple[int, int], *, J: int) -> np.ndarray:
    """The Gaussian averaging filter (real, sum 1 up to the periodisation's tails) on the ``shape`` grid."""
    return gabor_2d(shape, sigma=0.8 * 2 ** (J - 1), theta=0.0, xi=0.0, slant=1.0).real


def wavelets(shape: tuple[int, int], *, J: int, L: int) -> np.ndarray:
    """The J L Morlet wavelets ``(J L, M, N)`` on the ``shape`` grid, ordered by scale, then angle ``pi t / L``."""
    waves = [
        morlet_2d(shape, sigma=0.8 * 2**j, theta=math.pi * t / L, xi=0.75 * math.pi / 2**j, slant=4.0 / L)
        for j in range(J)
        for t in range(L)
    ]
    return np.stack(waves)


class Scattering2D(torch.nn.Module):
    """The second-order scattering transform of ``(n, C, H, W)`` images as ``(n, C K, h, w)`` features.

    ``K = n_coefficients(J, L)`` per channel (order 0, then order 1 by scale
    and angle, then order 2 by the first scale and angle, then the second);
    ``h, w = output_side(H, J), output_side(W, J)``. The filters are
    buffers computed from (H, W, J, L) alone, not parameters: the module has
    nothing to train and nothing to store.

    Parameters
    ----------
    shape:
        (H, W) of the images; each side at least ``2**(J + 1)``.
    J, L:
        Scales and orientations (2 and 8 in Tramer and Boneh 2021).
    chunk:
        Images transformed at once (memory: about ``chunk * C * L^2 * 18 * (H + 8) * (W + 8)`` bytes for J = 2).

    Examples
    --------
    >>> net = Scattering2D((28, 28))
    >>> tuple(net(torch.zeros(2, 1, 28, 28)).shape)
    (2, 81, 7, 7)
    """

    wave_hat: torch.Tensor  # (J L, M, N) the wavelets' spectra on the padded grid (real)
    average: torch.Tensor  # (M N, h w) the low-pass filter at each output position

    def __init__(self, shape: tuple[int, int], *, J: int = 2, L: int = 8, chunk: int = 256) -> None:
        super().__init__()
        if J < 1 or L < 1:
            raise ValueError(f"J and L must be positive, got J={J}, L={L}")
        height, width = (int(s) for s in shape)
        if min(height, width) < 2 ** (J + 1):
            raise ValueError(f"images must be at least {2 ** (J + 1)} pixels a side for J={J}, got {height} x {width}")
        self.shape, self.J, self.L, self.chunk = (height, width), J, L, chunk
        self.padded = (padded_side(height, J), padded_side(width, J))
        waves = wavelets(self.padded, J=J, L=L)
        # A wavelet is its own conjugate reflected (psi(-u) = conj psi(u)), so its spectrum is real (to rounding).
        self.register_buffer("wave_hat", torch.from_numpy(np.fft.fft2(waves).real.astype(np.float32)),
                             persistent=False)
        self.register_buffer("average", torch.from_numpy(averaging_matrix(self.padded, J=J).astype(np.float32)),
                             persistent=False)

    @property
    def n_coefficients(self) -> int:
        return n_coefficients(self.J, self.L)

    def output_shape(self, channels: int) -> tuple[int, int, int]:
        """The shape of one image's features: ``(channels * K, h, w)``."""
        return (channels * self.n_coefficients, output_side(self.shape[0], self.J), output_side(self.shape[1], self.J))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or tuple(images.shape[-2:]) != self.shape:
            raise ValueError(f"expected images (n, C, {self.shape[0]}, {self.shape[1]}), got {tuple(images.shape)}")
        n, channels = images.shape[:2]
        flat = images.reshape(n * channels, *self.shape).float()
        parts = [self._transform(part) for part in torch.split(flat, self.chunk)] if n else []
        out = torch.cat(parts) if parts else flat.new_zeros((0, self.n_coefficients, *self.output_shape(1)[1:]))
        return out.reshape(n, *self.output_shape(channels))

    def _transform(self, x: torch.Tensor) -> torch.Tensor:
        """``(m, H, W)`` single-channel images -> ``(m, K, h, w)``."""
        J, L = self.J, self.L
        top, left = (self.padded[0] - self.shape[0]) // 2, (self.padded[1] - self.shape[1]) // 2
        bottom, right = self.padded[0] - self.shape[0] - top, self.padded[1] - self.shape[1] - left
        padded = torch.nn.functional.pad(x[:, None], (left, right, top, bottom), mode="reflect")  # (m, 1, M, N)
        first = _modulus(torch.fft.ifft2(torch.fft.fft2(padded) * self.wave_hat))  # (m, J L, M, N): |x * psi|
        maps = [padded, first]
        if J > 1:
            first_hat = torch.fft.fft2(first[:, : (J - 1) * L])  # the scales that have a coarser one to go on to
        for j1 in range(J - 1):
            parents = first_hat[:, j1 * L : (j1 + 1) * L, None]  # (m, L, 1, M, N)
            children = self.wave_hat[(j1 + 1) * L :]  # the wavelets of the scales j2 > j1
            maps.append(_modulus(torch.fft.ifft2(parents * children)).flatten(1, 2))
        # The low-pass average sampled on the output grid is one matrix product per map: cheaper than an FFT
        # of each map when only (H W / 16) of its values are kept.
        stacked = torch.cat([m.flatten(2) for m in maps], dim=1)  # (m, K, M N)
        return (stacked @ self.average).unflatten(2, self.output_shape(1)[1:])


def _modulus(z: torch.Tensor) -> torch.Tensor:
    """``|z|`` of a complex tensor (through its real view: faster than ``abs`` on the CPU, the same values)."""
    return torch.linalg.vector_norm(torch.view_as_real(z), dim=-1)


def averaging_matrix(padded: tuple[int, int], *, J: int) -> np.ndarray:
    """``(M N, h w)``: column (a, b) is the low-pass filter centred on the padded grid's point ``2**J (a + 1, b + 1)``.

    A map ``u`` (flattened) times this matrix is the circular convolution ``u * phi`` sampled every ``2**J``
    pixels, without the first and last rows and columns (they lie in the reflected border).
    """
    M, N = padded
    step = 2**J
    low = low_pass(padded, J=J)
    rows, cols = np.arange(M), np.arange(N)
    columns = []
    for a in range(1, M // step - 1):
        for b in range(1, N // step - 1):
            # phi(p - u) for every u: the filter indexed by (p - u) mod the grid
            columns.append(low[np.ix_((step * a - rows) % M, (step * b - cols) % N)].ravel())
    return np.stack(columns, axis=1)


def cached_features(
    images: torch.Tensor, net: Scattering2D, *, cache_dir: str | os.PathLike[str] | None = None
) -> torch.Tensor:
    """``net(images)``, read from or written to the data cache, keyed by the images' bytes, the transform and device.

    The features of private images are private, as the images are: the file
    lives in ``<cache>/features`` beside the datasets (``$PRIVML_DATA``), its
    name is a digest of the inputs (nothing is printed), and it is written
    atomically (a temporary file renamed), so a crash leaves no half file.
    A file that cannot be read, or of another shape, is recomputed.
    """
    device = images.device
    contiguous = images.detach().float().contiguous().cpu()
    digest = hashlib.sha256()
    digest.update(f"scatter-v1 J={net.J} L={net.L} shape={tuple(contiguous.shape)} {device.type}".encode())
    digest.update(contiguous.numpy().tobytes())
    folder = resolve_cache_dir(cache_dir) / "features"
    path = folder / f"scatter-J{net.J}-L{net.L}-{device.type}-{digest.hexdigest()[:32]}.npy"
    expected = (contiguous.shape[0], *net.output_shape(contiguous.shape[1]))
    if path.is_file():
        try:
            stored = np.load(path, allow_pickle=False, mmap_mode="r")
            if stored.shape == expected and stored.dtype == np.float32:
                return torch.from_numpy(np.array(stored)).to(device)
        except (OSError, ValueError):
            pass  # unreadable: recompute and overwrite
    with torch.no_grad():
        features = net.to(device)(images.float())
    _write_atomically(path, features.cpu().numpy())
    return features


def _write_atomically(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            np.save(stream, array, allow_pickle=False)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
