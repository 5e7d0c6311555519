"""SGLang's host indices as an int64 numpy array, and their bounds, without giving up the GIL.

A thread that gives the GIL up waits up to a switch interval (5 ms) to get it back while another
thread runs Python, and SGLang's scheduler thread does most of the time. Every torch call gives it
up (``aminmax``, ``item``, slicing, ``to``), and so does every numpy loop over more than
``NUMPY_NOGIL_MIN`` elements: four such calls per batch took a DRAM get of 64 KiB pages next to one
busy Python thread from 4 GB/s to 0.3 GB/s. ``Tensor.numpy`` does not (a view, for a CPU int64
tensor, which SGLang's host indices are), and bounds are reduced in slices below that size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

NUMPY_NOGIL_MIN = 500
"""numpy releases the GIL for a loop over more than this many elements (``NPY_BEGIN_THREADS_THRESHOLDED``)."""


def index_array(indices: Any) -> np.ndarray:
    """``indices`` (a torch tensor or array-like of integers) as a 1-D C-contiguous int64 numpy
    array: a view of a CPU int64 contiguous tensor, else a copy. Raises ``TypeError`` for non-integer values.

    A CPU tensor without grad (SGLang's host indices) costs ONE torch call (``Tensor.numpy``, a
    view) and its checks are numpy's: right after a store call's copy has evicted the caches,
    each torch call costs 15-20 us of cache misses (its binding code), ten of them about 65 us."""
    if isinstance(indices, torch.Tensor):
        try:
            arr = indices.numpy()
        except (TypeError, RuntimeError):  # on another device, requiring grad, or a dtype numpy lacks
            if indices.dtype.is_floating_point or indices.dtype.is_complex or indices.dtype == torch.bool:
                raise TypeError(f"host indices are not integers: {indices.dtype}") from None
            arr = indices.detach().to(device="cpu", dtype=torch.int64).numpy()
    else:
        arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"host indices are not integers: {arr.dtype}")
    return arr.astype(np.int64, copy=False).ravel()  # a copy only when strided (a view's slice)


def bounds(values: np.ndarray) -> tuple[int, int]:
    """(min, max) of a non-empty int64 array, reduced in slices numpy runs with the GIL held."""
    step = NUMPY_NOGIL_MIN
    if len(values) <= step:
        return int(values.min()), int(values.max())
    low, high = int(values[0]), int(values[0])
    for start in range(0, len(values), step):
        part = values[start : start + step]
        low = min(low, int(part.min()))
        high = max(high, int(part.max()))
    return low, high
