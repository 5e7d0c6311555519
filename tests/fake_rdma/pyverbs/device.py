"""Context, Device, DeviceAttr, PortAttr, GIDEntry, get_device_list -- pyverbs.device's shapes."""

import errno

from . import _fabric
from ._enums_def import ibv_node_type, ibv_transport_type
from .addr import GID
from .base import PyverbsCM, PyverbsObject
from .pyverbs_error import PyverbsError, PyverbsRDMAError, PyverbsUserError  # noqa: F401
from .utils import gid_bytes


class Device(PyverbsObject):
    def __init__(self, name, guid, node_type, transport_type, index):
        self._name, self._guid, self._index = name, guid, index
        self._node_type, self._transport_type = node_type, transport_type

    @property
    def name(self):
        return self._name

    @property
    def node_type(self):
        return self._node_type

    @property
    def transport_type(self):
        return self._transport_type

    @property
    def guid(self):
        return self._guid

    @property
    def index(self):
        return self._index


def get_device_list():
    cfg = _fabric.load_config()
    if cfg is None:
        raise PyverbsRDMAError("Failed to get devices list")
    return [
        Device(
            d["name"].encode(),
            d["guid"],
            int(ibv_node_type.IBV_NODE_CA),
            int(ibv_transport_type.IBV_TRANSPORT_IB),
            d["index"],
        )
        for d in cfg["devices"]
    ]


class _Attrs(PyverbsObject):
    __slots__ = ()

    def __init__(self, values):
        for name, value in values.items():
            setattr(self, name, value)


class DeviceAttr(_Attrs):
    __slots__ = tuple(
        [
            "fw_version",
            "node_guid",
            "sys_image_guid",
            "max_mr_size",
            "page_size_cap",
            "vendor_id",
            "vendor_part_id",
            "hw_ver",
            "max_qp",
            "max_qp_wr",
            "device_cap_flags",
            "max_sge",
            "max_sge_rd",
            "max_cq",
            "max_cqe",
            "max_mr",
            "max_pd",
            "max_qp_rd_atom",
            "max_ee_rd_atom",
            "max_res_rd_atom",
            "max_qp_init_rd_atom",
            "max_ee_init_rd_atom",
            "atomic_caps",
            "max_ee",
            "max_rdd",
            "max_mw",
            "max_raw_ipv6_qps",
            "max_raw_ethy_qp",
            "max_mcast_grp",
            "max_mcast_qp_attach",
            "max_ah",
            "max_fmr",
            "max_map_per_fmr",
            "max_srq",
            "max_srq_wr",
            "max_srq_sge",
            "max_pkeys",
            "local_ca_ack_delay",
            "phys_port_cnt",
        ]
    )


class PortAttr(_Attrs):
    __slots__ = tuple(
        [
            "state",
            "max_mtu",
            "active_mtu",
            "gid_tbl_len",
            "port_cap_flags",
            "port_cap_flags2",
            "max_msg_sz",
            "bad_pkey_cntr",
            "qkey_viol_cntr",
            "pkey_tbl_len",
            "lid",
            "sm_lid",
            "lmc",
            "max_vl_num",
            "sm_sl",
            "subnet_timeout",
            "init_type_reply",
            "active_width",
            "active_speed",
            "phys_state",
            "link_layer",
            "flags",
        ]
    )


class GIDEntry(PyverbsObject):
    def __init__(self, subnet_prefix=0, interface_id=0, gid_index=0, port_num=0, gid_type=0, ndev_ifindex=0):
        self._raw = subnet_prefix.to_bytes(8, "big") + interface_id.to_bytes(8, "big")
        self.gid_index, self.port_num, self.gid_type, self.ndev_ifindex = (
            gid_index,
            port_num,
            gid_type,
            ndev_ifindex,
        )

    @property
    def gid_subnet_prefix(self):
        return int.from_bytes(self._raw[:8], "big")

    @property
    def gid_interface_id(self):
        return int.from_bytes(self._raw[8:], "big")

    def gid_str(self):
        return str(GID(_raw=self._raw))


class Context(PyverbsCM):
    def __init__(self, **kwargs):
        self.name = kwargs.get("name")
        if self.name is None:
            raise PyverbsUserError("Device name must be provided")
        self.nic = _fabric.nic_for(self.name)
        self.dev = self.nic.dev
        self._open = True
        self.num_comp_vectors = 1

    def _check(self):
        if not self._open:
            raise PyverbsRDMAError("Context is closed", errno.EBADF)

    def close(self):
        self._open = False

    def query_device(self):
        self._check()
        lim = self.dev["limits"]
        return DeviceAttr(
            dict(
                lim,
                fw_version="sim",
                node_guid=self.dev["guid"],
                sys_image_guid=self.dev["guid"],
                vendor_id=0,
                vendor_part_id=0,
                hw_ver=0,
                phys_port_cnt=1,
                page_size_cap=0xFFFFF000,
                atomic_caps=0,
                max_res_rd_atom=lim["max_qp_rd_atom"] * lim["max_qp"],
                max_srq=0,
                max_srq_wr=0,
                max_srq_sge=0,
                max_ah=1 << 20,
                max_pkeys=1,
                local_ca_ack_delay=16,
                max_mw=0,
                max_fmr=0,
                max_map_per_fmr=0,
                max_mcast_grp=0,
                max_mcast_qp_attach=0,
                max_ee=0,
                max_rdd=0,
                max_ee_rd_atom=0,
                max_ee_init_rd_atom=0,
                max_raw_ipv6_qps=0,
                max_raw_ethy_qp=0,
                device_cap_flags=0,
            )
        )

    def _port(self, port_num):
        self._check()
        if port_num != 1:
            raise PyverbsRDMAError(f"Failed to query port {port_num}", errno.EINVAL)
        return self.dev["port"]

    def query_port(self, port_num):
        p = self._port(port_num)
        return PortAttr(
            {
                "state": p["state"],
                "max_mtu": p["max_mtu"],
                "active_mtu": p["active_mtu"],
                "gid_tbl_len": len(p["gids"]),
                "port_cap_flags": 0,
                "port_cap_flags2": 0,
                "max_msg_sz": p["max_msg_sz"],
                "bad_pkey_cntr": 0,
                "qkey_viol_cntr": 0,
                "pkey_tbl_len": 1,
                "lid": p["lid"],
                "sm_lid": 0,
                "lmc": 0,
                "max_vl_num": 1,
                "sm_sl": 0,
                "subnet_timeout": 0,
                "init_type_reply": 0,
                "active_width": 2,
                "active_speed": 32,
                "phys_state": 5,
                "link_layer": p["link_layer"],
                "flags": 1,
            }
        )

    def _gid_entry(self, port_num, index):
        gids = self._port(port_num)["gids"]
        if not 0 <= index < len(gids):
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {port_num}")
        return gids[index]

    def query_gid(self, port_num, index):
        text, _ = self._gid_entry(port_num, index)
        return GID(text)

    def query_gid_type(self, port_num, index):
        text, gid_type = self._gid_entry(port_num, index)
        if gid_bytes(text) == bytes(16):
            raise PyverbsRDMAError(f"Failed to query gid type of port {port_num} and gid index {index}")
        return gid_type

    def query_gid_table(self, max_entries, flags=0):
        out = []
        for i, (text, gid_type) in enumerate(self._port(1)["gids"][:max_entries]):
            raw = gid_bytes(text)
            if raw == bytes(16):
                continue
            entry_type = 2 if gid_type == 1 else 1  # ibv_gid_type: ROCE_V2 / ROCE_V1
            out.append(
                GIDEntry(int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big"), i, 1, entry_type)
            )
        return out

    def query_gid_ex(self, port_num, gid_index, flags=0):
        text, gid_type = self._gid_entry(port_num, gid_index)
        raw = gid_bytes(text)
        return GIDEntry(
            int.from_bytes(raw[:8], "big"),
            int.from_bytes(raw[8:], "big"),
            gid_index,
            port_num,
            2 if gid_type else 1,
        )

    def query_pkey(self, port_num, index):
        self._port(port_num)
        return 0xFFFF
