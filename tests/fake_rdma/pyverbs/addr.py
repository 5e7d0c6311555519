"""GID, GlobalRoute, AHAttr, AH -- pyverbs.addr's shapes."""

from .base import PyverbsCM, PyverbsObject
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError
from .utils import gid_bytes, gid_text


class GID(PyverbsObject):
    def __init__(self, val=None, _raw=None):
        self._raw = bytes(16) if _raw is None else bytes(_raw)
        if val is not None:
            self._raw = gid_bytes(val)

    @property
    def gid(self):
        return str(self)

    @gid.setter
    def gid(self, val):
        self._raw = gid_bytes(val)

    def __str__(self):
        return gid_text(self._raw)


class GlobalRoute(PyverbsObject):
    def __init__(self, dgid=None, flow_label=0, sgid_index=0, hop_limit=1, traffic_class=0):
        self._dgid = dgid.gid  # like pyverbs: a GID is required (None fails here)
        self.flow_label = flow_label
        self.sgid_index = sgid_index
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class

    @property
    def dgid(self):
        return self._dgid

    @dgid.setter
    def dgid(self, val):
        gid_bytes(val)
        self._dgid = val


class AHAttr(PyverbsObject):
    def __init__(self, dlid=0, sl=0, src_path_bits=0, static_rate=0, is_global=0, port_num=1, gr=None):
        self.port_num, self.sl, self.src_path_bits = port_num, sl, src_path_bits
        self.dlid, self.static_rate, self.is_global = dlid, static_rate, is_global
        self._dgid = "0000:0000:0000:0000:0000:0000:0000:0000"
        self.flow_label = self.sgid_index = self.traffic_class = 0
        self.hop_limit = 0
        if is_global:
            if gr is None:
                raise PyverbsUserError("Global AH Attr is created but gr parameter is None")
            self._dgid = gr.dgid
            self.flow_label, self.sgid_index = gr.flow_label, gr.sgid_index
            self.hop_limit, self.traffic_class = gr.hop_limit, gr.traffic_class

    @property
    def dgid(self):
        return self._dgid if self.is_global else None

    @dgid.setter
    def dgid(self, val):
        if self.is_global:
            gid_bytes(val)
            self._dgid = val


class AH(PyverbsCM):
    def __init__(self, pd, **kwargs):
        attr = kwargs.get("attr")
        if attr is None:
            raise PyverbsUserError("Missing AH attributes")
        if pd.ctx.dev["port"]["link_layer"] == 2 and not attr.is_global:
            raise PyverbsRDMAError("Failed to create AH")  # RoCE needs a GRH
        self.pd, self.attr = pd, attr
