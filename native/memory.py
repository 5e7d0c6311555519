"""Faulting memory in: ``populate`` (native ``madvise(MADV_POPULATE_WRITE)``, GIL released)."""

from __future__ import annotations

import errno
from typing import Any

from . import _core


class PopulateUnsupported(OSError):
    """The kernel does not know ``MADV_POPULATE_WRITE`` (EINVAL: Linux < 5.14)."""


def populate(buf: Any) -> None:
    """Fault the pages under the writable C-contiguous buffer ``buf`` in for writing, with the GIL
    released for the syscall; never changes a byte. Raises :class:`PopulateUnsupported`,
    ``OSError`` for a range the kernel cannot back (ENOMEM, EFAULT), TypeError or BufferError
    for a read-only or non-contiguous buffer."""
    try:
        _core.populate(buf)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise PopulateUnsupported(
                exc.errno, "MADV_POPULATE_WRITE: not supported by this kernel"
            ) from None
        raise
