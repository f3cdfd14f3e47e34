"""DP-SGD for PyTorch models (needs ``torch``; the rest of privml never imports it).

=====================================  ===================================================
name                                   what
=====================================  ===================================================
:class:`DPSGD`                         the training engine: Poisson sampling, flat
                                       clipping (ghost or vmap), one noise draw per
                                       logical step, micro-batches, PLD/RDP accounting
:class:`TorchClassifier`               scikit-learn estimator (fit/predict/predict_proba)
:class:`ScatterClassifier`             DP-SGD on ScatterNet features (Tramer and
                                       Boneh 2021)
:func:`validate_model`, `fix_model`    reject layers that mix examples; BatchNorm ->
                                       GroupNorm, MultiheadAttention -> DP version
:class:`TramerBonehCNN`,               models (Tramer & Boneh 2021; a GroupNorm ResNet)
:class:`GroupNormResNet`
:class:`WideResNet`,                   GroupNorm WRN-16-4 (De et al. 2022); a transformer
:class:`TransformerClassifier`         encoder classifier of token sequences
:class:`DPMultiheadAttention`          nn.MultiheadAttention from nn.Linear layers
                                       (``fix_model`` swaps it in)
:class:`PoissonSampler`,               the sampling the accountant assumes (index
:class:`FixedSizeSampler`,             batches: Poisson, or exactly b records without
:func:`poisson_batches`                replacement; batches of a torch Dataset)
:func:`shard_bounds`                   data-parallel DP-SGD (torch.distributed):
                                       each rank's shard, and how to launch it
=====================================  ===================================================

Privacy of everything here: sensitivity C of the sum of per-example gradients
each clipped *as a whole* to C (Abadi et al. 2016); add/remove-one neighbours
with sampled Gaussian mechanism accounting (Mironov, Talwar and Zhang 2019) by
default, or replace-one neighbours (``neighbouring="replace-one"``: the clipped
sum moves by up to 2C when the replaced record is sampled; the tight Poisson
pair of :class:`~privml.accounting.PLDAccountant`, group privacy, or, for fixed-size
batches, Wang, Balle and Kasiviswanathan 2019).
"""

from privml.torch._attention import DPMultiheadAttention
from privml.torch._classifier import TorchClassifier
from privml.torch._clipping import MODES, clip_factors
from privml.torch._distributed import shard_bounds
from privml.torch._dpsgd import DPSGD
from privml.torch._dpsgd_setup import cross_entropy_per_example
from privml.torch._ghost import ghost_clipped_sum
from privml.torch._per_sample import per_example_gradients, vmap_clipped_sum
from privml.torch._sampling import FixedSizeSampler, PoissonSampler, micro_batches, poisson_batches
from privml.torch._scatter_classifier import ScatterClassifier
from privml.torch._validation import UnsupportedModuleError, find_problems, fix_model, validate_model
from privml.torch.models import GroupNormResNet, TramerBonehCNN, TransformerClassifier, WideResNet, build_model

__all__ = [
    "DPSGD",
    "DPMultiheadAttention",
    "MODES",
    "FixedSizeSampler",
    "GroupNormResNet",
    "PoissonSampler",
    "ScatterClassifier",
    "TorchClassifier",
    "TramerBonehCNN",
    "TransformerClassifier",
    "UnsupportedModuleError",
    "WideResNet",
    "build_model",
    "clip_factors",
    "cross_entropy_per_example",
    "find_problems",
    "fix_model",
    "ghost_clipped_sum",
    "micro_batches",
    "per_example_gradients",
    "poisson_batches",
    "shard_bounds",
    "validate_model",
    "vmap_clipped_sum",
]
