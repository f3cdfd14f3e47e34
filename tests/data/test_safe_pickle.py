from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from privml.data._safe_pickle import MalformedPickleError, UnsafePickleError, load_restricted
from tests.data.builders import py2_batch_pickle


class _RunsACommand:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _CallsEval:
    def __reduce__(self):
        return (eval, ("__import__('os').getpid()",))


def test_python2_numpy_batch_is_read():
    data = np.arange(2 * 3072, dtype=np.int64).reshape(2, 3072).astype(np.uint8)
    out = load_restricted(py2_batch_pickle(data, [3, 7]))
    assert out[b"labels"] == [3, 7]
    np.testing.assert_array_equal(out[b"data"], data)
    assert out[b"data"].dtype == np.uint8 and out[b"data"].flags.writeable
    assert out[b"filenames"] == [b"img_0.png", b"img_1.png"]


@pytest.mark.parametrize("protocol", [3, 4])
def test_python3_numpy_arrays_are_read(protocol):
    arr = np.arange(12, dtype=np.float64).reshape(3, 4)
    fortran = np.asfortranarray(arr.astype(np.int32))
    out = load_restricted(pickle.dumps({"x": arr, "f": fortran, "n": [1, (1.5, None)]}, protocol=protocol))
    np.testing.assert_array_equal(out["x"], arr)
    np.testing.assert_array_equal(out["f"], fortran)
    assert out["n"] == [1, (1.5, None)]


@pytest.mark.parametrize("protocol", [0, 1, 2])
def test_python3_low_protocol_bytes_are_read(protocol):
    # From a review: Python 3 writes bytes at protocols 0-2 as _codecs.encode(str, "latin1") (b"" as bytes()),
    # and such re-pickled CIFAR batches were refused with "refusing to load _codecs.encode".
    arr = np.arange(6, dtype=np.uint8).reshape(2, 3)
    batch = {b"data": arr, b"labels": [1, 2], b"raw": bytes(range(256)), b"empty": b"", b"none": np.zeros(0)}
    out = load_restricted(pickle.dumps(batch, protocol=protocol))
    np.testing.assert_array_equal(out[b"data"], arr)
    assert out[b"labels"] == [1, 2] and out[b"raw"] == bytes(range(256)) and out[b"empty"] == b""
    assert out[b"none"].shape == (0,)


class _OtherCodec:
    def __reduce__(self):
        import codecs

        return (codecs.encode, ("payload", "rot13"))


class _SizedBytes:
    def __reduce__(self):
        return (bytes, (10**9,))


@pytest.mark.parametrize(("obj", "message"), [(_OtherCodec(), r"_codecs\.encode with arguments of types \(str, str\)"),
                                              (_SizedBytes(), r"builtins\.bytes with arguments")])  # fmt: skip
def test_codec_and_bytes_stubs_accept_only_what_python_writes(obj, message):
    for protocol in (2, 4):
        with pytest.raises(UnsafePickleError, match=message):
            load_restricted(pickle.dumps(obj, protocol=protocol))


def test_command_in_pickle_is_rejected_not_run(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"data": _RunsACommand(str(marker))}, protocol=2)
    with pytest.raises(UnsafePickleError, match=r"refusing to load (posix|os|nt)\.system"):
        load_restricted(payload)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_eval_is_rejected_at_every_protocol(protocol):
    with pytest.raises(UnsafePickleError, match=r"refusing to load (builtins|__builtin__)\.eval"):
        load_restricted(pickle.dumps(_CallsEval(), protocol=protocol))


def test_rejection_is_a_value_error():
    with pytest.raises(ValueError):
        load_restricted(pickle.dumps(_CallsEval()))


def test_object_dtype_is_rejected():
    payload = pickle.dumps(np.array([1, "a"], dtype=object), protocol=2)
    with pytest.raises(UnsafePickleError):
        load_restricted(payload)


def test_forged_dtype_state_is_rejected():
    # A uint8 dtype whose state claims fields / object flags must not reach numpy.
    honest = pickle.dumps(np.zeros(2, dtype=np.uint8), protocol=3)
    forged = honest.replace(b"K\x00t", b"K\x3ft", 1)  # flags 0 -> 63 (NPY_ITEM_HASOBJECT and friends)
    assert forged != honest
    with pytest.raises(UnsafePickleError, match="not a plain numeric dtype"):
        load_restricted(forged)


def test_ndarray_marker_cannot_be_called():
    # GLOBAL numpy.ndarray, then REDUCE it with ((2,), 'O') as arguments.
    payload = b"\x80\x02cnumpy\nndarray\nK\x02\x85X\x01\x00\x00\x00O\x86R."
    with pytest.raises(pickle.UnpicklingError):
        load_restricted(payload)


def test_length_mismatch_is_rejected():
    honest = pickle.dumps(np.zeros(4, dtype=np.uint8), protocol=3)
    forged = honest.replace(b"K\x04\x85", b"K\x05\x85", 1)  # declare 5 elements, keep 4 bytes
    assert forged != honest
    with pytest.raises(UnsafePickleError, match="needs 5 bytes, got 4"):
        load_restricted(forged)


def test_malformed_stream():
    with pytest.raises(pickle.UnpicklingError):
        load_restricted(b"\x80\x02}q\x00(")


def test_deep_nesting_is_one_malformed_pickle_error():
    # 100k nested lists built from raw opcodes (EMPTY_LIST..., APPEND...): materialising them overflowed the
    # interpreter's stack, a RecursionError the CLI printed as a 1,686-line traceback.
    depth = 100_000
    payload = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    with pytest.raises(MalformedPickleError, match="nested too deeply") as caught:
        load_restricted(payload)
    assert isinstance(caught.value, pickle.UnpicklingError) and isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value)


def test_malformed_stream_is_a_value_error():
    # A ValueError, so that a command reading a data file reports it as bad input (exit 2, one line).
    with pytest.raises(ValueError, match="malformed pickle"):
        load_restricted(b"\x80\x02}q\x00(")


@pytest.mark.parametrize("stream", [
    b"c_codecs\nencode\n(N(dV__defaults__\n(Vpwned\nVlatin1\ntstb.",  # BUILD with slot state: setattr
    b"c__builtin__\nbytes\n(dVmarker\nI1\nsb.",  # BUILD with a dict state
])
def test_a_stream_cannot_change_an_allowed_function(stream):
    # Handed the bare function, a BUILD set its __defaults__: _codecs.encode() then returned b"pwned" to every
    # later stream of the process, past its (str, "latin1") check (a review).
    with pytest.raises(UnsafePickleError, match="state"):
        load_restricted(stream)
    with pytest.raises(MalformedPickleError):  # still needs its two arguments
        load_restricted(b"c_codecs\nencode\n)R.")


def test_an_allowed_function_is_never_returned():
    with pytest.raises(UnsafePickleError, match="not returned"):
        load_restricted(b"c_codecs\nencode\n.")
