"""``native.memory.populate``: madvise(MADV_POPULATE_WRITE) over a buffer, GIL released; the
pages become resident without a byte changing, and bad buffers are refused by name."""

from __future__ import annotations

import errno
import mmap

import numpy as np
import pytest
from smaps import address_of, resident_kib

from hicache_mooncake.native import memory
from hicache_mooncake.native.memory import PopulateUnsupported, populate


def test_a_range_is_faulted_in_and_keeps_its_bytes() -> None:
    size = 8 << 20
    m = mmap.mmap(-1, size)
    view = np.frombuffer(m, np.uint8)
    view[:4096] = 7
    address = address_of(m)
    assert resident_kib(address) < 1024
    populate(view[1000 : 3 << 20])  # an unaligned start: its page is included
    assert resident_kib(address) >= 3 << 10
    assert (view[:4096] == 7).all() and not view[4096:].any()
    populate(view)
    assert resident_kib(address) * 1024 >= size
    populate(bytearray())  # nothing to do
    del view


def test_bad_buffers_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match="buf is read-only"):
        populate(b"abc")
    with pytest.raises(TypeError, match="buf is not C-contiguous"):
        populate(np.zeros(16)[::2])
    with pytest.raises(TypeError, match="expected a buffer"):
        populate(3)


def test_a_kernel_without_the_advice_is_populate_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    def old_kernel(buf: object) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(memory._core, "populate", old_kernel)
    with pytest.raises(PopulateUnsupported):
        populate(bytearray(10))
