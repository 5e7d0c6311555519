"""PD -- pyverbs.pd's shape."""

from .base import PyverbsCM
from .pyverbs_error import PyverbsRDMAError


class PD(PyverbsCM):
    def __init__(self, creator, **kwargs):
        from .device import Context

        if not isinstance(creator, Context):
            raise PyverbsRDMAError("Failed to allocate PD")
        creator._check()
        self.ctx = creator
        self.nic = creator.nic
        self._open = True

    def close(self):
        self._open = False
