"""Model files: ``.npz`` arrays plus JSON metadata, never pickles.

A pickle executes code when it is loaded, so a model file from an untrusted
source could take over the machine that opens it. privml model files are
plain numpy ``.npz`` archives read with ``allow_pickle=False``; everything
that is not an array (method, hyper-parameters, the privacy guarantee, the
preprocessing applied, library version) is a JSON document stored in the
archive as bytes.
"""

from __future__ import annotations

import importlib
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from privml import __version__
from privml.registry import METHODS
from privml.release import check_released_info, strip_seeds

FORMAT = "privml-model"
#: The newest format this privml reads. 1: the original layout. 2: ``extra`` may hold a data schema
#: (``extra.schema``, :class:`~privml.data.Schema`) or ``extra.bounds``, which every reader must apply to
#: incoming rows: a reader of format 1 would ignore them and answer unscaled rows silently wrong, so files that
#: carry one are written as format 2 (refused by older privml), the others still as format 1.
FORMAT_VERSION = 2
_METADATA_KEY = "__metadata__"

#: method name -> "module:Class" of the estimator that reads it back (from :mod:`privml.registry`)
MODEL_CLASSES: dict[str, str] = {name: spec.target for name, spec in METHODS.items()}


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, range):  # classes=range(10), as the README writes it
        return list(value)
    # ValueError, as for any other bad input: json.dumps lets it through unchanged.
    raise ValueError(f"cannot store {type(value).__name__} in model metadata")


def json_safe(value: Any) -> Any:
    """``value`` as strict JSON data: numpy scalars become Python numbers and
    non-finite floats the strings ``"inf"``, ``"-inf"``, ``"nan"`` (JSON has no
    infinity; :meth:`PrivacyGuarantee.from_dict` reads them back with ``float``)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


#: Where a model runs is a property of the machine that loads it, not of the model: stored as "auto", so a
#: file trained on a GPU loads and predicts on a machine without one (a review found "cuda" stored).
_MACHINE_SETTINGS = {"device": "auto"}


def _params_for_json(params: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in strip_seeds(params).items():
        if isinstance(value, np.random.Generator | np.random.SeedSequence):
            value = None  # a live generator is not a reproducible setting (and would replay the noise)
        out[key] = _MACHINE_SETTINGS.get(key, value)
    return out


def save_model(model: Any, path: str | Path, *, extra: dict | None = None) -> Path:
    """Write a fitted privml estimator to ``path`` (``.npz`` is appended if missing).

    The file holds the arrays, the constructor settings with every seed
    blanked (a stored seed would let anyone replay the noise), the guarantee
    and the ``fit_info_`` keys the class declares releasable
    (``released_info``); non-private diagnostics are never written
    (:mod:`privml.release`). A file of a private-prediction method or of the
    non-private baseline holds the non-private model: keep it secret
    (:mod:`privml.registry`).

    ``extra`` is JSON metadata to keep beside the model (e.g. the dataset
    description and preprocessing steps, so ``predict`` can apply them).
    """
    method = getattr(model, "method", None)
    if method not in MODEL_CLASSES:
        raise ValueError(f"cannot save {type(model).__name__}: unknown method {method!r}")
    fit_info = dict(getattr(model, "fit_info_", {}))
    # The release rule (privml.release): only declared public or DP diagnostics reach the file.
    check_released_info(type(model).__name__, fit_info, getattr(model, "released_info", ()))
    arrays = model._model_arrays()
    for name, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise ValueError(f"array {name!r} has dtype object, which cannot be stored without pickle")
        # A file with NaN weights would be refused by every reader (restore_model): refuse to write it.
        if np.asarray(arr).dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            raise ValueError(
                f"array {name!r} holds NaN or infinite values: the training diverged (lower the learning rate)"
            )
    metadata = {
        "format": FORMAT,
        "format_version": 2 if {"schema", "bounds"} & set(extra or {}) else 1,
        "privml_version": __version__,
        "method": method,
        "class": type(model).__name__,
        # A model may name its own constructor settings for the file (e.g. leave out a
        # budget ledger, which lives outside the model); by default all of get_params().
        "params": _params_for_json(model._file_params() if hasattr(model, "_file_params") else model.get_params()),
        "privacy": model.privacy_.to_dict(),
        "fit_info": fit_info,
        "extra": extra or {},
    }
    # Round-trip through the encoder first so numpy values become plain Python, then make it strict JSON.
    plain = json.loads(json.dumps(metadata, default=_json_default, allow_nan=True))
    blob = json.dumps(json_safe(plain), allow_nan=False).encode("utf-8")
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Typed Any: numpy's stub would match a str-keyed dict against savez's allow_pickle: bool.
    metadata_array: dict[str, Any] = {_METADATA_KEY: np.frombuffer(blob, dtype=np.uint8)}
    np.savez(path, **arrays, **metadata_array)
    return path


#: The array names :func:`save_model` writes, over every estimator's ``_model_arrays``: ``weights`` and
#: ``classes`` (privml.linear, prediction-sensitivity), ``teacher_weights`` (subsample-and-aggregate),
#: ``state.<name>`` (a torch state dict) and the metadata. Any other member is refused unread, so a file
#: cannot make a reader decompress data no model uses.
_ARRAY_NAMES = frozenset({"weights", "classes", "teacher_weights", _METADATA_KEY})
_STATE_PREFIX = "state."
#: The most bytes a model file's arrays may hold uncompressed, all together (as the zip directory and each
#: array's header declare them, checked before anything is decompressed). The largest network privml builds,
#: the WRN-16-4, is 2.7M float32 parameters (11 MB); 512 MiB is 45 times that, and 67M float64 linear weights
#: (2^20 hashed features x 64 classes), while a 1.5 MB file can no longer claim gigabytes of memory.
MAX_MODEL_BYTES = 512 * 2**20
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a member first, or an empty archive


def _allowed_name(name: str) -> bool:
    return name in _ARRAY_NAMES or (name.startswith(_STATE_PREFIX) and len(name) > len(_STATE_PREFIX))


def _check_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> str:
    """The array name of one member, once its name and declared size (zip directory and npy header) pass."""
    name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else ""
    if not _allowed_name(name):
        raise ValueError(f"{path} is not a privml model file (unexpected member {info.filename[:80]!r})")
    if info.file_size > MAX_MODEL_BYTES:
        raise ValueError(f"{path}: array {name!r} declares {info.file_size} bytes, over the {MAX_MODEL_BYTES} cap")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        read_header = np.lib.format.read_array_header_2_0 if version >= (2, 0) else np.lib.format.read_array_header_1_0
        shape, _, dtype = read_header(member)
    if dtype.hasobject:
        raise ValueError(f"{path} is not a privml model file (it needs pickle to load: refused)")
    # The header's shape, not the zip directory, decides how much numpy allocates: it may not claim more
    # than the member holds (math.prod of Python ints: no overflow).
    if math.prod(int(s) for s in shape) * dtype.itemsize > info.file_size:
        raise ValueError(f"{path}: array {name!r} declares a shape {shape} larger than its data")
    return name


def _read_arrays(path: Path, *, metadata_only: bool = False) -> dict[str, np.ndarray]:
    """The arrays of an .npz model file (or its metadata alone), every member's name and size checked first."""
    with path.open("rb") as handle:
        magic = handle.read(len(np.lib.format.MAGIC_PREFIX))
    if magic == np.lib.format.MAGIC_PREFIX:
        raise ValueError(f"{path} is not a privml model file (a bare array, not an .npz archive)")
    if not magic.startswith(_ZIP_MAGIC):
        what = "it needs pickle to load: refused" if magic[:1] == b"\x80" else "not an .npz archive"
        raise ValueError(f"{path} is not a privml model file ({what})")
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        names = [_check_member(archive, info, path) for info in infos]
        if sum(info.file_size for info in infos) > MAX_MODEL_BYTES:
            raise ValueError(f"{path}: its arrays declare more bytes than the {MAX_MODEL_BYTES} cap of a model file")
        if len(set(names)) != len(names):
            raise ValueError(f"{path} is not a privml model file (an array is stored twice)")
        arrays = {}
        for name, info in zip(names, infos, strict=True):
            if metadata_only and name != _METADATA_KEY:
                continue
            with archive.open(info) as member:
                arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
        return arrays


def read_model_file(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """Arrays and metadata of a model file, without constructing the estimator.

    Members privml does not write, and arrays over :data:`MAX_MODEL_BYTES`, are refused before anything is
    decompressed; every failure is a one-line ValueError (or FileNotFoundError) naming the file.
    """
    return _read_model_file(Path(path), metadata_only=False)


def read_model_metadata(path: str | Path) -> dict:
    """The metadata of a model file, checked as :func:`read_model_file` does, without decompressing the weights
    (callers that only dispatch on the method or the dataset)."""
    return _read_model_file(Path(path), metadata_only=True)[1]


def _read_model_file(path: Path, *, metadata_only: bool) -> tuple[dict[str, np.ndarray], dict]:
    if not path.exists():
        raise FileNotFoundError(f"model file not found: {path}")
    if not path.is_file():
        raise ValueError(f"{path} is not a privml model file (not a regular file)")
    try:
        arrays = _read_arrays(path, metadata_only=metadata_only)
    except ValueError as exc:  # ours, or numpy's for a malformed header
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path} is not a privml model file ({_one_line(exc)})") from exc
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, NotImplementedError) as exc:  # truncated or unreadable
        reason = f"{type(exc).__name__}: {_one_line(exc)}"
        raise ValueError(f"{path} is not a readable privml model file ({reason})") from exc
    except MemoryError as exc:  # within the cap, but more than this machine has free
        raise ValueError(f"{path}: not enough memory to read the model file") from exc
    if _METADATA_KEY not in arrays:
        raise ValueError(f"{path} is not a privml model file (no metadata)")
    try:
        metadata = json.loads(arrays.pop(_METADATA_KEY).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a privml model file (its metadata is not JSON)") from exc
    except RecursionError as exc:  # privml writes metadata a few levels deep
        raise ValueError(f"{path} is not a privml model file (its metadata is nested too deeply)") from exc
    return arrays, _check_metadata(metadata, path)


def _check_metadata(metadata: Any, path: Path) -> dict:
    if not isinstance(metadata, dict):
        raise ValueError(f"{path} is not a privml model file (its metadata is not a JSON object)")
    for section in ("params", "privacy", "fit_info", "extra"):
        if not isinstance(metadata.get(section, {}), dict):
            raise ValueError(f"{path}: model metadata field {section!r} must be a JSON object")
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path} is not a privml model file (format {metadata.get('format')!r})")
    version = metadata.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"{path}: model metadata field 'format_version' must be an integer")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path} was written by a newer privml (format {metadata['format_version']}); upgrade privml to read it"
        )
    return metadata


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def restore_model(model: Any, arrays: dict[str, np.ndarray], metadata: dict, path: str | Path) -> Any:
    """Give ``model`` the fitted state in ``arrays``/``metadata``, then check it before any use.

    A file whose metadata lies (missing keys, wrong types, shapes that
    disagree with the classes) or whose arrays hold NaN or infinite values is
    refused with a one-line ValueError naming the file, so nothing is served
    or charged from it.
    """
    for name, array in arrays.items():
        # Every array but the labels is weights, which privml writes as real floats; a bool, integer or
        # complex array would be cast on load (complex with its imaginary part dropped) into another model.
        if name != "classes" and array.dtype not in _WEIGHT_DTYPES:
            raise ValueError(f"{path}: array {name!r} has dtype {array.dtype}, not the real floats of model weights")
        if array.dtype.kind in "fc" and not np.all(np.isfinite(array)):
            raise ValueError(f"{path}: array {name!r} holds NaN or infinite values")
    try:
        # The settings in the file must pass the estimator's own checks, as at fit time.
        if hasattr(model, "_check_hyperparameters"):
            model._check_hyperparameters()
        model._restore_arrays(arrays, metadata)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise ValueError(f"{path}: the model file is inconsistent ({type(exc).__name__}: {_one_line(exc)})") from exc
    _check_shapes(model, path)
    _check_classes(model, path)
    return model


#: What privml's estimators store weights as (torch state in float32 or half precision, linear in float64).
_WEIGHT_DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32", "float64"))


def _check_classes(model: Any, path: str | Path) -> None:
    """The stored class array must be the class set the settings name (fit keeps the given order)."""
    declared, classes = getattr(model, "classes", None), getattr(model, "classes_", None)
    if declared is None or classes is None:
        return
    if not isinstance(declared, list | tuple) or list(declared) != np.asarray(classes).tolist():
        raise ValueError(f"{path}: the classes array ({len(classes)} classes) is not the params' classes")


def _check_shapes(model: Any, path: str | Path) -> None:
    """Weights must match the class count: (d,) for two classes, (d, k) for k > 2 (teachers alike)."""
    classes = getattr(model, "classes_", None)
    weights = [getattr(model, "weights_", None)]
    weights += [getattr(t, "weights_", None) for t in getattr(model, "teachers_", [])]
    for w in weights:
        if w is None:
            continue
        w = np.asarray(w)
        if classes is None:
            ok = w.ndim == 1
        else:
            k = len(classes)
            ok = k >= 2 and ((w.ndim == 1 and k == 2) or (w.ndim == 2 and k > 2 and w.shape[1] == k))
        if not ok or w.size == 0:
            shown = "no classes" if classes is None else f"{len(classes)} classes"
            raise ValueError(f"{path}: weights of shape {w.shape} do not fit {shown}")


def load_model(path: str | Path) -> Any:
    """Read a model file written by :func:`save_model` into a fitted estimator."""
    return model_from_file(*read_model_file(path), path)


def model_from_file(arrays: dict[str, np.ndarray], metadata: dict, path: str | Path) -> Any:
    """The fitted estimator of a model file already read by :func:`read_model_file` (``path`` names it in errors)."""
    method = metadata.get("method")
    target = MODEL_CLASSES.get(method) if isinstance(method, str) else None
    if target is None:
        raise ValueError(f"{path}: unknown model method {method!r}")
    module_name, class_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    # A seed is never taken from a file (files of privml <= 0.1.0 stored one): a loaded
    # model draws fresh OS entropy unless the caller sets random_state explicitly.
    try:
        model = cls(**strip_seeds(metadata.get("params", {})))
    except TypeError as exc:
        raise ValueError(f"{path}: the model's settings do not fit {class_name} ({_one_line(exc)})") from exc
    if getattr(model, "method", method) != method:
        # One class, two methods (TorchClassifier: dpsgd-cnn, or nonprivate-cnn at epsilon = inf): the settings must
        # make the method the file claims, or a baseline's weights would be read back as a DP release.
        raise ValueError(f"{path}: the file says {method!r}, but its settings make a {model.method!r} model")
    restore_model(model, arrays, metadata, path)
    model.model_metadata_ = metadata
    return model
