"""Read pickled numpy batches without running code from the pickle.

A pickle is a program: ``pickle.load`` imports and calls whatever callables
the stream names (``os.system`` included), so privml never calls
``pickle.load`` on data. Some public formats are pickles all the same (the
"CIFAR-10 python version" batches). :func:`load_restricted` reads them with a
:class:`pickle.Unpickler` whose ``find_class`` -- the only way a stream can
reach a callable: the ``GLOBAL``, ``STACK_GLOBAL`` and ``EXT*`` opcodes all go
through it -- resolves a handful of names, as in the "Restricting Globals"
recipe of the Python ``pickle`` documentation, and resolves them to privml's
own inert stand-ins rather than to numpy:

- ``numpy.core.multiarray._reconstruct`` (``numpy._core...`` in numpy 2) gives
  an empty :class:`_ArrayStub`;
- ``numpy.ndarray`` gives a marker object that cannot be called;
- ``numpy.dtype`` gives a :class:`_DtypeStub`, for fixed-size numeric codes only;
- ``_codecs.encode`` and ``bytes``, with which Python 3 writes ``bytes`` at
  protocols 0-2, give stubs that accept only ``(str, "latin1")`` and no
  argument respectively (so batches re-pickled by Python 3 are read).

numpy pickles an array as ``_reconstruct(ndarray, (0,), b"b")`` followed by a
``BUILD`` with the state ``(version, shape, dtype, is_fortran, raw_bytes)``,
and a dtype as ``dtype(code, 0, 1)`` with the state ``(3, byteorder, None,
None, None, -1, -1, 0)``. The stubs' ``__setstate__`` check that state field by
field and build the array with :func:`numpy.frombuffer`, so no numpy
``__setstate__`` ever sees untrusted input (a forged dtype state could
otherwise mark raw bytes as Python object pointers). Any other name -- ``eval``,
``os.system``, any class -- raises :class:`UnsafePickleError` before anything
is imported or called. Containers, numbers, strings and bytes are built by
the pickle machine itself without calling user code.
"""

from __future__ import annotations

import io
import math
import pickle
from typing import IO, Any, Literal, TypeGuard

import numpy as np

from privml.exceptions import PrivmlError

# Fixed-size numeric codes only: an object dtype would let an array carry objects.
_ALLOWED_DTYPES = frozenset({"b1", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f4", "f8"})
_ByteOrder = Literal["<", ">", "|", "="]
_BYTEORDERS = frozenset({"<", ">", "|", "="})


class UnsafePickleError(PrivmlError, pickle.UnpicklingError, ValueError):
    """A pickle referred to something outside the allow-list; nothing was run."""


class MalformedPickleError(PrivmlError, pickle.UnpicklingError, ValueError):
    """A pickle stream that is not a well-formed one of plain containers and arrays; a one-line message.

    A ValueError too, so that a command reading a data file reports it as bad input (exit 2).
    """


def _text(value: object) -> object:
    # Python 2 pickles read with encoding="bytes" give bytes where numpy wrote str.
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _is_byteorder(value: object) -> TypeGuard[_ByteOrder]:
    return value in _BYTEORDERS


class _NdarrayMarker:
    """Stands for ``numpy.ndarray`` in a pickle; deliberately not callable."""

    __slots__ = ()


_NDARRAY = _NdarrayMarker()


class _DtypeStub:
    """A validated numeric dtype code plus the byte order from its pickled state."""

    __slots__ = ("byteorder", "code")

    def __init__(self, code: object, align: object = 0, copy: object = 1) -> None:
        code = _text(code)
        if not isinstance(code, str) or code not in _ALLOWED_DTYPES:
            raise UnsafePickleError(f"dtype {code!r} is not allowed (only fixed-size numeric dtypes)")
        self.code = code
        self.byteorder: _ByteOrder = "="

    def __setstate__(self, state: object) -> None:
        # numpy's dtype state, version 3 (4 appends metadata): (version, byteorder,
        # subarray, names, fields, elsize, alignment, flags). A plain numeric dtype
        # has no subarray, names or fields, elsize = alignment = -1 and flags 0.
        if not isinstance(state, tuple) or len(state) not in (8, 9) or state[0] not in (3, 4):
            raise UnsafePickleError(f"unexpected dtype state {state!r}")
        byteorder = _text(state[1])
        if not _is_byteorder(byteorder) or state[2:7] != (None, None, None, -1, -1) or state[7] != 0:
            raise UnsafePickleError(f"dtype state {state!r} is not a plain numeric dtype")
        if len(state) == 9 and state[8] not in (None, {}):
            raise UnsafePickleError("dtype metadata is not allowed")
        self.byteorder = byteorder

    def to_numpy(self) -> np.dtype:
        return np.dtype(self.code).newbyteorder(self.byteorder)


class _ArrayStub:
    """Receives a pickled array's state and rebuilds it with ``numpy.frombuffer``."""

    __slots__ = ("array",)

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: object) -> None:
        # ndarray state: (version, shape, dtype, is_fortran, raw_bytes), version 1.
        if not isinstance(state, tuple) or len(state) != 5 or state[0] != 1:
            raise UnsafePickleError("unexpected ndarray state (expected (1, shape, dtype, is_fortran, bytes))")
        _, shape, dtype, is_fortran, raw = state
        if not (isinstance(shape, tuple) and all(isinstance(s, int) and s >= 0 for s in shape)):
            raise UnsafePickleError(f"ndarray shape {shape!r} is not a tuple of sizes")
        if not isinstance(dtype, _DtypeStub) or not isinstance(is_fortran, (bool, int)):
            raise UnsafePickleError("ndarray state does not hold a numeric dtype")
        if isinstance(raw, str):  # Python 2 str read with encoding="latin1"
            raw = raw.encode("latin-1")
        if not isinstance(raw, (bytes, bytearray)):
            raise UnsafePickleError(f"ndarray data must be bytes, got {type(raw).__name__}")
        dt = dtype.to_numpy()
        if len(raw) != math.prod(shape) * dt.itemsize:
            raise UnsafePickleError(
                f"ndarray of shape {shape} and dtype {dt} needs {math.prod(shape) * dt.itemsize} bytes, got {len(raw)}"
            )
        order: Literal["C", "F"] = "F" if is_fortran else "C"
        self.array = np.frombuffer(bytes(raw), dtype=dt).reshape(shape, order=order).copy()


def _reconstruct(subtype: object, shape: object, typecode: object) -> _ArrayStub:
    if subtype is not _NDARRAY:
        raise UnsafePickleError(f"_reconstruct may only build numpy.ndarray, got {subtype!r}")
    return _ArrayStub()


def _latin1_bytes(text: object, encoding: object) -> bytes:
    # Python 3 writes bytes at protocols 0-2 as _codecs.encode(str, "latin1"): that one call, nothing else.
    if type(text) is not str or encoding != "latin1":
        raise UnsafePickleError(
            f"refusing to load _codecs.encode with arguments of types ({type(text).__name__}, "
            f"{type(encoding).__name__}): only bytes written as (str, 'latin1') are read"
        )
    return text.encode("latin-1")


def _empty_bytes(*args: object) -> bytes:
    # ... and an empty bytes object as bytes() (with no argument: bytes(n) would allocate n bytes).
    if args:
        raise UnsafePickleError("refusing to load builtins.bytes with arguments: only bytes() is read")
    return b""


class _AllowedCall:
    """An allowed function as a stream sees it: callable, and nothing else.

    Handed the bare function, a stream's BUILD could set its attributes
    (``__defaults__`` turned ``_codecs.encode()`` into a constant for the
    whole process, a review showed); this wrapper has no attributes to set
    and refuses a state.
    """

    __slots__ = ("_function",)
    _function: Any

    def __init__(self, function: Any) -> None:
        object.__setattr__(self, "_function", function)

    def __call__(self, *args: object) -> Any:
        return self._function(*args)

    def __setattr__(self, name: str, value: object) -> None:
        raise UnsafePickleError(f"refusing to set {name!r} on an allowed function")

    def __setstate__(self, state: object) -> None:
        raise UnsafePickleError("refusing to give an allowed function a state")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _AllowedCall(_reconstruct),
    ("numpy._core.multiarray", "_reconstruct"): _AllowedCall(_reconstruct),
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _AllowedCall(_DtypeStub),  # a call builds an instance; the class itself is out of reach
    ("_codecs", "encode"): _AllowedCall(_latin1_bytes),
    ("__builtin__", "bytes"): _AllowedCall(_empty_bytes),
    ("builtins", "bytes"): _AllowedCall(_empty_bytes),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"refusing to load {module}.{name}: privml reads pickles with an allow-list of numpy array "
                "reconstruction only and never runs code from them"
            ) from None


def _materialise(obj: Any, memo: dict[int, Any]) -> Any:
    """Replace the stubs inside plain containers by real arrays and dtypes."""
    key = id(obj)
    if key in memo:
        return memo[key]
    if isinstance(obj, _ArrayStub):
        if obj.array is None:
            raise UnsafePickleError("an ndarray was reconstructed without its state")
        out: Any = obj.array
    elif isinstance(obj, _DtypeStub):
        out = obj.to_numpy()
    elif isinstance(obj, dict):
        out = {}
        memo[key] = out
        for k, v in obj.items():
            out[_materialise(k, memo)] = _materialise(v, memo)
    elif isinstance(obj, list):
        out = []
        memo[key] = out
        out.extend(_materialise(v, memo) for v in obj)
    elif isinstance(obj, tuple):
        out = tuple(_materialise(v, memo) for v in obj)
    elif isinstance(obj, _NdarrayMarker):
        raise UnsafePickleError("numpy.ndarray may only appear inside an array reconstruction")
    elif isinstance(obj, _AllowedCall):  # a function is no data: a file holding one is not a data file
        raise UnsafePickleError("an allowed function may only be called inside the stream, not returned")
    else:
        out = obj
    memo[key] = out
    return out


def load_restricted(data: bytes | IO[bytes], *, encoding: str = "bytes") -> Any:
    """Unpickle plain containers and numeric numpy arrays, and nothing else.

    Parameters
    ----------
    data : bytes or binary file
        The pickle stream.
    encoding : str, default "bytes"
        How Python 2 ``str`` objects are decoded; ``"bytes"`` keeps them as
        :class:`bytes` (the CIFAR-10 batches were written by Python 2).

    Returns
    -------
    object
        Dicts, lists, tuples, numbers, strings, bytes and numeric arrays.

    Raises
    ------
    UnsafePickleError
        If the stream names anything outside the allow-list, or an array or
        dtype state is not that of a plain numeric array (nothing named by
        the stream is imported or called).
    MalformedPickleError
        (a :class:`pickle.UnpicklingError` and a ValueError) if the stream is
        malformed or nests containers too deeply.
    """
    stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    try:
        return _materialise(_RestrictedUnpickler(stream, encoding=encoding).load(), {})
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, AttributeError, TypeError, ValueError, IndexError, KeyError, EOFError) as exc:
        # A malformed stream surfaces as whatever the pickle machine tripped on.
        first = (str(exc).strip().splitlines() or [""])[0]
        raise MalformedPickleError(f"malformed pickle: {type(exc).__name__}: {first}") from exc
    except RecursionError:
        # Containers nested deeper than the interpreter's stack (a crafted stream; real batches are a few
        # levels deep). Raised outside the handler so the message is not chained to a thousand-frame trace.
        pass
    raise MalformedPickleError("malformed pickle: containers nested too deeply")
