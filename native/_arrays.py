"""Conversions of the arguments the wrappers pass to ``_core`` (contiguous uint64 arrays)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

U64 = np.dtype(np.uint64)
U64Array = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]
I64Array = npt.NDArray[np.int64]


def as_u64(name: str, values: Any) -> U64Array:
    """``values`` as a C-contiguous uint64 array (no copy when it already is one).

    Raises ValueError naming the first negative or too large element (``name[i]``), TypeError for
    anything that is not integers (floats, bools, strings).
    """
    if type(values) is np.ndarray and values.dtype == U64 and values.flags.c_contiguous:
        return values
    arr = np.asarray(values)
    if type(values) is list and arr.ndim == 1 and arr.dtype.kind == "i" and min(values, default=0) >= 0:
        return arr.astype(U64)  # the usual list of offsets or sizes: no numpy pass to check signs
    kind = arr.dtype.kind
    if kind == "u":
        return np.ascontiguousarray(arr, dtype=U64)
    if kind == "i":
        negative = arr < 0
        if negative.any():
            i = int(np.argmax(negative.ravel()))
            raise ValueError(f"{name}[{i}] is negative: {int(arr.ravel()[i])}")
        return np.ascontiguousarray(arr, dtype=U64)
    if kind == "f" and not isinstance(values, np.ndarray):
        if arr.size == 0:
            return np.zeros(arr.shape, dtype=U64)  # np.asarray([]) is float64
        arr = np.asarray(values, dtype=object)  # a list mixing ints >= 2**63 with others
        kind = "O"
    if kind == "O":
        flat = arr.ravel()
        for i, item in enumerate(flat):
            if not isinstance(item, int | np.integer) or isinstance(item, bool):
                raise TypeError(f"{name}[{i}] must be an int, got {type(item).__name__}")
            if not 0 <= int(item) < 1 << 64:
                raise ValueError(f"{name}[{i}] is out of range for uint64: {int(item)}")
        return np.array([int(x) for x in flat], dtype=U64).reshape(arr.shape)
    raise TypeError(f"{name} must be an array of non-negative integers, got dtype {arr.dtype}")
