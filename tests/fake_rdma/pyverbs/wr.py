"""SGE, SendWR, RecvWR -- pyverbs.wr's shapes. Like pyverbs, a SendWR copies its SGEs when built
and points at ``next_wr``'s request (the chain is walked when posted)."""

from ._enums_def import ibv_send_flags as F
from ._enums_def import ibv_wr_opcode as O
from .base import PyverbsCM
from .pyverbs_error import PyverbsUserError


class SGE(PyverbsCM):
    def __init__(self, addr, length, lkey):
        self.addr, self.length, self.lkey = addr, length, lkey

    def read(self, length, offset):
        import ctypes

        return ctypes.string_at(self.addr + offset, length)


class RecvWR(PyverbsCM):
    def __init__(self, wr_id=0, num_sge=0, sg=None, next_wr=None):
        self.wr_id, self.num_sge = wr_id, num_sge
        self._sges = [(s.addr, s.length, s.lkey) for s in (sg or [])[:num_sge]]
        self._next = next_wr


class SendWR(PyverbsCM):
    def __init__(
        self,
        wr_id=0,
        opcode=O.IBV_WR_SEND,
        num_sge=0,
        imm_data=0,
        sg=None,
        send_flags=F.IBV_SEND_SIGNALED,
        next_wr=None,
    ):
        mw_opcodes = [O.IBV_WR_LOCAL_INV, O.IBV_WR_BIND_MW, O.IBV_WR_SEND_WITH_INV]
        if opcode not in mw_opcodes and (num_sge < 1 or sg is None):
            raise PyverbsUserError("A WR needs at least one SGE")
        self._sges = [(int(s.addr), int(s.length), int(s.lkey)) for s in sg[:num_sge]] if sg else []
        self._wr_id = wr_id
        self._opcode = int(opcode)
        self._send_flags = int(send_flags)
        self.imm_data = imm_data
        self._next = next_wr
        self._remote_addr = 0
        self._rkey = 0

    @property
    def next_wr(self):
        if self._next is None:
            return None
        # pyverbs builds an empty SendWR here, which its own constructor refuses
        raise PyverbsUserError("A WR needs at least one SGE")

    @next_wr.setter
    def next_wr(self, val):
        self._next = val

    @property
    def wr_id(self):
        return self._wr_id

    @wr_id.setter
    def wr_id(self, val):
        self._wr_id = val

    @property
    def num_sge(self):
        return len(self._sges)

    @property
    def opcode(self):
        return self._opcode

    @opcode.setter
    def opcode(self, val):
        self._opcode = int(val)

    @property
    def send_flags(self):
        return self._send_flags

    @send_flags.setter
    def send_flags(self, val):
        self._send_flags = int(val)

    def set_wr_rdma(self, rkey, addr):
        self._rkey, self._remote_addr = rkey, addr

    def chain(self):
        wr = self
        while wr is not None:
            yield wr
            wr = wr._next
