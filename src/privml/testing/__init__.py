"""Deliberately broken implementations, for tests and benchmarks only: never train with them.

:mod:`privml.testing.negative_controls` holds planted privacy bugs (the
realised batch size as DP-SGD's divisor, half the sensitivity in output
perturbation, ...) that the audits of :mod:`privml.audit` must catch;
:mod:`privml.testing.torch_controls` holds broken torch DP-SGD engines (an
unclipped layer, too little or reused noise, the row-order fault);
:mod:`privml.testing.prediction_controls` holds broken private predictors
(half the logit sensitivity, the unhalved vote);
:mod:`privml.testing.feature_mean_controls` holds broken private feature
means (no clip, half the noise) and their audit. Nothing
in privml imports this package; it exists so that the tests and
``benchmarks/audit.py`` share one copy of each bug.
"""
