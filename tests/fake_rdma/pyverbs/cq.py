"""CQ, CompChannel, WC -- pyverbs.cq's shapes. A CQ holds ``cqe`` completions; one more overruns
it (the CQ errors, its QPs go to the error state, ``poll`` fails), as on a NIC."""

import collections
import errno
import os
import struct
import threading

from ._enums_def import LAYOUT
from .base import PyverbsCM, PyverbsObject
from .pyverbs_error import PyverbsError, PyverbsRDMAError

_EVENT = struct.Struct("<Q")


class WC(PyverbsObject):
    __slots__ = (
        "wr_id",
        "status",
        "opcode",
        "vendor_err",
        "byte_len",
        "qp_num",
        "src_qp",
        "imm_data",
        "wc_flags",
        "pkey_index",
        "slid",
        "sl",
        "dlid_path_bits",
    )

    def __init__(
        self,
        wr_id=0,
        status=0,
        opcode=0,
        vendor_err=0,
        byte_len=0,
        qp_num=0,
        src_qp=0,
        imm_data=0,
        wc_flags=0,
        pkey_index=0,
        slid=0,
        sl=0,
        dlid_path_bits=0,
    ):
        self.wr_id, self.status, self.opcode, self.vendor_err = wr_id, status, opcode, vendor_err
        self.byte_len, self.qp_num, self.src_qp, self.imm_data = byte_len, qp_num, src_qp, imm_data
        self.wc_flags, self.pkey_index, self.slid, self.sl = wc_flags, pkey_index, slid, sl
        self.dlid_path_bits = dlid_path_bits


class CompChannel(PyverbsCM):
    def __init__(self, context):
        context._check()
        self.context = context
        self._r, self._w = os.pipe()
        self._open = True

    def get_cq_event(self, expected_cq):
        raw = os.read(self._r, _EVENT.size)
        if len(raw) != _EVENT.size:
            raise PyverbsRDMAError("Failed to get CQ event", errno.EIO)
        if _EVENT.unpack(raw)[0] != id(expected_cq):
            raise PyverbsRDMAError("Received event on an unexpected CQ", errno.EINVAL)
        expected_cq.num_events += 1

    def _notify(self, cq):
        os.write(self._w, _EVENT.pack(id(cq)))

    def close(self):
        if self._open:
            self._open = False
            os.close(self._r)
            os.close(self._w)


if LAYOUT in ("59", "current"):  # rdma-core 59 added CompChannel.fd

    def _fd(self):
        return self._r

    CompChannel.fd = property(_fd)


class CQ(PyverbsCM):
    def __init__(self, context, cqe, cq_context=None, channel=None, comp_vector=0):
        context._check()
        if not 1 <= cqe <= context.dev["limits"]["max_cqe"]:
            raise PyverbsRDMAError("Failed to create a CQ", errno.EINVAL)
        self.context = context
        self.channel = channel
        self._cqe = cqe
        self._entries = collections.deque()
        self._lock = threading.Lock()
        self._armed = False
        self._overrun = False
        self._qps = []
        self.num_events = 0
        self._open = True

    @property
    def cqe(self):
        return self._cqe

    @property
    def comp_channel(self):
        return self.channel

    def _push(self, wc):
        """Called by the NIC; False when this completion overran the CQ."""
        notify = False
        with self._lock:
            if not self._open:
                return True
            if self._overrun or len(self._entries) >= self._cqe:
                self._overrun = True
                qps = list(self._qps)
            else:
                self._entries.append(wc)
                notify, self._armed = self._armed, False
                qps = None
        if qps is not None:
            for qp in qps:
                qp._state.set_error()
            return False
        if notify and self.channel is not None:
            self.channel._notify(self)
        return True

    def poll(self, num_entries=1):
        with self._lock:
            if not self._open:
                raise PyverbsError("CQ is closed")
            if self._overrun:
                raise PyverbsRDMAError("Failed to poll CQ", errno.EOVERFLOW)
            wcs = []
            while self._entries and len(wcs) < num_entries:
                wcs.append(self._entries.popleft())
        return len(wcs), wcs

    def req_notify(self, solicited_only=False):
        """Arm for the NEXT completion (those already queued raise no event: poll after arming)."""
        with self._lock:
            self._armed = True

    def ack_events(self, num_events):
        self.num_events -= num_events

    def close(self):
        with self._lock:
            self._open = False
            self._entries.clear()
