"""MR -- pyverbs.mr's shape: registers real process memory (``address=``) or allocates a buffer."""

import ctypes
import errno

from ._enums_def import ibv_access_flags as A
from .base import PyverbsCM
from .pd import PD
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError


class MR(PyverbsCM):
    def __init__(self, creator, length=0, access=0, address=None, implicit=False, **kwargs):
        if not isinstance(creator, PD) or not creator._open:
            raise PyverbsRDMAError("Failed to register a MR", errno.EINVAL)
        nic = creator.nic
        lim = creator.ctx.dev["limits"]
        if length <= 0 or length > lim["max_mr_size"]:
            raise PyverbsRDMAError(
                f"Failed to register a MR. length: {length}, access flags: {access}", errno.EINVAL
            )
        if (
            access & (A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_ATOMIC)
            and not access & A.IBV_ACCESS_LOCAL_WRITE
        ):
            # the kernel refuses remote write without local write
            raise PyverbsRDMAError(
                f"Failed to register a MR. length: {length}, access flags: {access}", errno.EINVAL
            )
        self._owned = None
        if address:
            self._addr = int(address)
        else:
            self._owned = ctypes.create_string_buffer(length)
            self._addr = ctypes.addressof(self._owned)
        self.pd = creator
        self.nic = nic
        self._length = length
        self.access = int(access)
        with nic.mem.exclusive(), nic.lock:
            if len(nic.mrs_by_lkey) >= lim["max_mr"]:
                raise PyverbsRDMAError("Failed to register a MR", errno.ENOMEM)
            self._lkey = nic.new_key()
            self._rkey = nic.new_key()
            nic.mrs_by_lkey[self._lkey] = self
            nic.mrs_by_rkey[self._rkey] = self
        self._open = True

    def covers(self, addr, n):
        return self._open and self._addr <= addr and addr + n <= self._addr + self._length

    @property
    def lkey(self):
        return self._lkey

    @property
    def rkey(self):
        return self._rkey

    @property
    def length(self):
        return self._length

    @property
    def buf(self):
        return self._addr

    def read(self, length, offset):
        return ctypes.string_at(self._addr + offset, length)

    def write(self, data, length, offset=0):
        if length < 0:
            raise PyverbsUserError(f"length {length} is invalid")
        data = data.encode() if isinstance(data, str) else bytes(data)
        ctypes.memmove(self._addr + offset, data, length)

    def close(self):
        """Deregister: from here on the NIC refuses this MR's keys (in-flight work fails)."""
        if not getattr(self, "_open", False):
            return
        with self.nic.mem.exclusive(), self.nic.lock:
            self._open = False
            self.nic.mrs_by_lkey.pop(self._lkey, None)
            self.nic.mrs_by_rkey.pop(self._rkey, None)
