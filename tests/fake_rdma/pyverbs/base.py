"""PyverbsObject / PyverbsCM (context managers that ``close()``), as in pyverbs.base."""

import errno

from .pyverbs_error import PyverbsRDMAError


def PyverbsRDMAErrno(msg, err=errno.EINVAL):  # noqa: N802 (pyverbs' name)
    return PyverbsRDMAError(msg, err)


class PyverbsObject:
    __slots__ = ("__dict__",)

    def set_log_level(self, val):
        pass


class PyverbsCM(PyverbsObject):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        pass
