"""Privacy mechanisms: add calibrated noise to f(D), or select privately.

Every mechanism is configured with (epsilon, delta), the sensitivity of the
function it protects and the neighbouring relation that sensitivity is
measured under; ``event`` describes one use for an accountant and ``privacy``
states the per-use guarantee.

Floating-point versus exact sampling
------------------------------------
Floating-point samplers (numpy's ``Generator``), in this package:

- :class:`LaplaceMechanism` (``laplace``), :class:`L2LaplaceMechanism` and
  :func:`sample_l2_laplace` (``gamma`` and ``standard_normal``),
- :class:`GaussianMechanism` (``normal``),
- :class:`ExponentialMechanism` (``gumbel``, Gumbel-max),
- :class:`AboveThreshold` (``laplace``),
- :func:`sample_noise`, the sampler under the additive ones above, for
  algorithms whose noise scale is calibrated elsewhere (DP-SGD, private
  prediction, objective perturbation, DP-CD, noise-reduction chains).

Their proofs assume exact real-valued noise. Doubles are not real numbers:
Mironov (2012, "On significance of the least significant bits for
differential privacy") showed that the set of doubles a textbook Laplace
sampler can produce around f(D) differs from the set around f(D'), so an
attacker who sees the exact bits of the output can in principle tell the two
apart, whatever epsilon says. These samplers are the right choice for ML
pipelines whose outputs are further processed (model training, prediction,
selection inside an algorithm), for experiments, and wherever exact output
bits are not published.

Exact, hardened samplers (integer and rational arithmetic with exact
rejection sampling; no floating-point number touches a sample):

- :class:`DiscreteLaplaceMechanism` and :class:`DiscreteGaussianMechanism`
  (``discrete``; Canonne, Kamath and Steinke 2020, Algorithms 1-3). Real
  queries are first rounded to a public grid; with the default
  ``random_state=None`` they read the operating system's secure generator.

Use them when a noisy statistic itself is published to an untrusted party
(counts, sums, a short vector of scores): the released value then carries its
guarantee exactly as proved. Use the floating-point mechanisms inside
learning algorithms, where outputs are post-processed and speed matters.
Either way, seeded ``random_state`` values are for tests and experiments
only: anyone who knows the seed can subtract the noise.
"""

from privml.mechanisms._above_threshold import AboveThreshold, MechanismHalted
from privml.mechanisms._base import Mechanism
from privml.mechanisms._discrete import DiscreteGaussianMechanism, DiscreteLaplaceMechanism
from privml.mechanisms._exponential import ExponentialMechanism
from privml.mechanisms._gaussian import GaussianMechanism
from privml.mechanisms._l2_laplace import L2LaplaceMechanism, sample_l2_laplace
from privml.mechanisms._laplace import LaplaceMechanism
from privml.mechanisms._noise import NOISE_DISTRIBUTIONS, sample_noise

__all__ = [
    "AboveThreshold",
    "DiscreteGaussianMechanism",
    "DiscreteLaplaceMechanism",
    "ExponentialMechanism",
    "GaussianMechanism",
    "L2LaplaceMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "MechanismHalted",
    "NOISE_DISTRIBUTIONS",
    "sample_l2_laplace",
    "sample_noise",
]
