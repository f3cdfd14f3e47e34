"""Damaged user data files: every one refused in one line, or read as exactly what it holds.

A small ``.npz`` and a small CSV are cut at every offset and have single bytes replaced at random (seeded):
over 2,000 files. Each must either be refused by a one-line ``ValueError`` (which the CLI turns into exit 2
before anything is trained: a sample goes through ``privml train`` below), or be read without loss of faith:

- an ``.npz`` carries a CRC-32 per member, so a change to any array byte is detectable: an accepted file must
  hold exactly the original arrays (a changed byte outside them, a timestamp in the zip header, changes none);
- a CSV has no checksum, and a digit changed into another digit is another well-formed CSV that no reader can
  tell from one written so. What the reader must not do is turn damage into a number silently: an accepted CSV
  must read as exactly what its text says by a strict parse (ASCII decimal numbers only; no ``1_5`` read as 15,
  no other scripts' digits), and a file cut short must end at a line break, so that a last value cut inside
  (0.125 to 0.12) is refused; a cut at a line break leaves a well-formed shorter file, read as the rows it has.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pytest

from privml.cli.main import main
from privml.data._user import load_csv, load_npz

_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _npz_bytes(tmp_path: Path, *, compressed: bool) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    arrays = {"X": rng.normal(size=(10, 3)), "y": np.arange(10) % 3}
    path = tmp_path / "source.npz"
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return path.read_bytes(), arrays


def _csv_text() -> str:
    rng = np.random.default_rng(1)
    rows = [f"{a:.3f},{b:.2f},{int(c)}\n" for a, b, c in zip(rng.normal(size=8), rng.uniform(0, 9, 8), np.arange(8) % 2)]
    return "x0,x1,label\n" + "".join(rows)


def _variants(data: bytes, flips: int, seed: int) -> list[tuple[str, bytes]]:
    """Every truncation, then ``flips`` copies with one byte replaced by another value (seeded)."""
    rng = np.random.default_rng(seed)
    out = [(f"cut at {k}", data[:k]) for k in range(len(data))]
    for _ in range(flips):
        at = int(rng.integers(len(data)))
        value = (data[at] + int(rng.integers(1, 256))) % 256
        out.append((f"byte {at} = {value}", data[:at] + bytes([value]) + data[at + 1 :]))
    return out


def _refused_in_one_line(exc: ValueError) -> None:
    text = str(exc)
    assert text and "\n" not in text, text


@pytest.mark.parametrize("compressed", [False, True])
def test_a_damaged_npz_is_refused_or_holds_exactly_the_original_arrays(tmp_path, compressed):
    data, arrays = _npz_bytes(tmp_path, compressed=compressed)
    path = tmp_path / "damaged.npz"
    accepted = 0
    variants = _variants(data, flips=400, seed=2)
    for what, content in variants:
        path.write_bytes(content)
        try:
            splits = load_npz(path, test_path=None)
        except ValueError as exc:  # any other exception fails the test: the CLI would print a traceback
            _refused_in_one_line(exc)
            continue
        accepted += 1
        assert what.startswith("byte"), what  # a truncated zip loses its directory: never accepted
        X = np.concatenate([splits.X_train, splits.X_test])
        y = np.concatenate([splits.y_train, splits.y_test])
        assert X.dtype == arrays["X"].dtype and y.dtype == arrays["y"].dtype, what
        assert sorted(X.tobytes()) == sorted(arrays["X"].tobytes()), what  # the same records (split order aside)
        np.testing.assert_array_equal(np.sort(y), np.sort(arrays["y"]), err_msg=what)
    assert len(variants) >= 500 and accepted < 0.2 * len(variants)


def _strict_reading(text: str) -> tuple[np.ndarray, np.ndarray]:
    """What a CSV's text says, parsed independently of privml: rows of two decimals and a label."""
    rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row and any(c.strip() for c in row)][1:]
    numbers = [[cell.strip(" \t") for cell in row[:2]] for row in rows]
    assert all(_DECIMAL.fullmatch(cell) for row in numbers for cell in row), rows
    return np.array([[float(c) for c in row] for row in numbers]), np.array([row[2].strip() for row in rows])


def test_a_damaged_csv_is_refused_or_read_as_exactly_what_it_says(tmp_path):
    text = _csv_text()
    data = text.encode()
    path = tmp_path / "damaged.csv"
    cut_accepted = 0
    variants = _variants(data, flips=1000, seed=3)
    for what, content in variants:
        path.write_bytes(content)
        try:
            splits = load_csv(path, label_column="label", test_path=None)
        except ValueError as exc:
            _refused_in_one_line(exc)
            continue
        got = content.decode()
        assert got.endswith(("\n", "\r")), what
        X, y = _strict_reading(got)
        order = np.argsort(np.concatenate([splits.lines_train, splits.lines_test]), kind="stable")
        np.testing.assert_array_equal(np.concatenate([splits.X_train, splits.X_test])[order], X, err_msg=what)
        np.testing.assert_array_equal(np.concatenate([splits.y_train, splits.y_test])[order], y, err_msg=what)
        if what.startswith("cut"):
            cut_accepted += 1
            assert text.startswith(got) and got.endswith("\n"), what  # a whole-row prefix
    assert len(variants) >= 1000
    assert 0 < cut_accepted <= text.count("\n") - 2  # cuts after the 2nd row on (a split needs rows)


def test_the_cli_refuses_damaged_files_in_one_line_with_exit_2(tmp_path, capsys):
    # A sample through `privml train`, in process: exit 2 and one line on stderr, before any training.
    data, _ = _npz_bytes(tmp_path, compressed=False)
    samples = [(".npz", data[: len(data) // 2]), (".npz", data[:100] + b"\xff" + data[101:]),
               (".csv", _csv_text().encode()[:-3]), (".csv", _csv_text().encode().replace(b"0.", b"0_", 1)),
               (".npz", b"PK\x03\x04not a zip")]
    for k, (suffix, content) in enumerate(samples):
        path = tmp_path / f"bad{k}{suffix}"
        path.write_bytes(content)
        status = main(["train", "--dataset", f"{suffix[1:]}:{path}", "--method", "output", "--epsilon", "1",
                       "--classes", "0,1,2"])
        err = capsys.readouterr().err
        assert status == 2, (suffix, err)
        assert err.count("\n") == 1 and "Traceback" not in err and str(path) in err, err


def _npy_member(header: dict, payload: bytes) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + payload


def _zip_of(tmp_path: Path, members: dict[str, bytes]) -> Path:
    import zipfile

    path = tmp_path / "crafted.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)  # consistent CRCs: the lie is in the content
    return path


@pytest.mark.parametrize("descr, message", [
    ("<c16", "not complex"), ("|O", "object array"), ([("a", "<f8"), ("b", "<i8")], "structured"),
    ("<M8[D]", "not complex, structured or other"),
])
def test_arrays_privml_does_not_train_on_are_refused(tmp_path, descr, message):
    X = _npy_member({"descr": descr, "fortran_order": False, "shape": (2, 2)}, b"\0" * 64)
    y = _npy_member({"descr": "<i8", "fortran_order": False, "shape": (2,)}, b"\0" * 16)
    path = _zip_of(tmp_path, {"X.npy": X, "y.npy": y})
    with pytest.raises(ValueError, match=message):
        load_npz(path, test_path=None)


def test_a_complex_array_saved_by_numpy_is_refused(tmp_path):
    path = tmp_path / "complex.npz"
    np.savez(path, X=np.ones((6, 2)) * (1 + 1j), y=np.arange(6) % 2)
    with pytest.raises(ValueError, match="complex"):
        load_npz(path, test_path=None)


@pytest.mark.parametrize("shape", [(4, 3), (1_000_000_000, 1_000_000), (2, 2)])
def test_a_header_that_lies_about_its_shape_is_refused_before_allocating(tmp_path, shape):
    X = _npy_member({"descr": "<f8", "fortran_order": False, "shape": shape}, np.ones(9).tobytes())  # 3 x 3 held
    y = _npy_member({"descr": "<i8", "fortran_order": False, "shape": (3,)}, np.zeros(3, dtype=np.int64).tobytes())
    path = _zip_of(tmp_path, {"X.npy": X, "y.npy": y})
    with pytest.raises(ValueError, match=r"claims shape .* but its member holds 72 bytes"):
        load_npz(path, test_path=None)


def test_split_arrays_that_disagree_on_the_record_shape_are_refused(tmp_path):
    path = tmp_path / "split.npz"
    np.savez(path, X_train=np.ones((5, 3)), y_train=np.zeros(5), X_test=np.ones((4, 2)), y_test=np.zeros(4))
    with pytest.raises(ValueError, match=r"test features have shape \(2,\) per record, training features \(3,\)"):
        load_npz(path, test_path=None)


def test_csv_cells_python_alone_would_read_are_refused(tmp_path):
    for cell in ("1_5", "\u0661", "2\u0663"):
        path = tmp_path / "cells.csv"
        path.write_text(f"x,label\n0.5,0\n{cell},1\n", encoding="utf-8")
        with pytest.raises(ValueError, match="line 3, column 'x': the cell is not a number"):
            load_csv(path, label_column="label", test_path=None)
