"""One opened RDMA port: device context, protection domain, the chosen GID and the device limits.

Shared by the client engine and the node responder. Every pyverbs error while opening is turned
into ``RdmaSetupError`` (a ``TransportError``) naming the device, port and what failed; callers
never see pyverbs' own exception types.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from ..errors import RdmaSetupError
from .options import RdmaOptions
from .verbs import Verbs, device_names

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceLimits:
    """What ``query_device`` / ``query_port`` allow (requests above these fail at the device)."""

    max_qp_wr: int
    max_sge: int
    max_sge_rd: int
    max_qp_rd_atom: int  # outstanding RDMA READs this device serves per QP (responder)
    max_qp_init_rd_atom: int  # ... and issues per QP (requester)
    max_cqe: int
    max_mr_size: int
    max_msg_sz: int


def gid_bytes(gid: Any) -> bytes:
    """pyverbs prints a GID as ``xxxx:xxxx:...`` (8 groups); -> 16 raw bytes."""
    raw = bytes.fromhex(str(gid).replace(":", ""))
    if len(raw) != 16:
        raise ValueError(f"not a GID: {gid}")
    return raw


def gid_text(raw: bytes) -> str:
    h = raw.hex()
    return ":".join(h[i : i + 4] for i in range(0, 32, 4))


def is_ipv4_mapped(raw: bytes) -> bool:
    return raw[:10] == bytes(10) and raw[10:12] == b"\xff\xff"


class RdmaDevice:
    def __init__(self, v: Verbs, options: RdmaOptions) -> None:
        self.v = v
        self.options = options
        names = device_names(v)
        name = options.device if options.device not in ("", "auto") else (names[0] if names else "")
        if name not in names:
            raise RdmaSetupError(
                f"RDMA device {name or '(any)'!r} not found (have {', '.join(names) or 'none'})"
            )
        self.name = name
        self.port = options.port
        self.ctx: Any = None
        self.pd: Any = None
        try:
            self.ctx = v.device.Context(name=name)
            port_attr = self.ctx.query_port(self.port)
            if int(port_attr.state) != v.e["IBV_PORT_ACTIVE"]:
                raise RdmaSetupError(f"{name} port {self.port} is not active (state {int(port_attr.state)})")
            dev_attr = self.ctx.query_device()
            self.limits = DeviceLimits(
                max_qp_wr=int(dev_attr.max_qp_wr),
                max_sge=int(dev_attr.max_sge),
                max_sge_rd=int(dev_attr.max_sge_rd) or int(dev_attr.max_sge),
                max_qp_rd_atom=int(dev_attr.max_qp_rd_atom),
                max_qp_init_rd_atom=int(dev_attr.max_qp_init_rd_atom),
                max_cqe=int(dev_attr.max_cqe),
                max_mr_size=int(dev_attr.max_mr_size),
                max_msg_sz=int(port_attr.max_msg_sz) or 1 << 31,
            )
            self.lid = int(port_attr.lid)
            self.mtu = int(port_attr.active_mtu)
            self.ethernet = int(port_attr.link_layer) == v.e["IBV_LINK_LAYER_ETHERNET"]
            self.gid_index, self.gid = self._pick_gid(int(port_attr.gid_tbl_len))
            self.pd = v.pd.PD(self.ctx)
        except v.error as exc:
            self.close()
            raise RdmaSetupError(f"cannot open RDMA device {name} port {self.port}: {exc}") from exc
        except BaseException:
            self.close()
            raise
        log.info(
            "RDMA %s port %d: GID index %d (%s), MTU enum %d, limits %s",
            name,
            self.port,
            self.gid_index,
            gid_text(self.gid),
            self.mtu,
            self.limits,
        )

    def _gid_at(self, index: int) -> tuple[bytes, int | None]:
        raw = gid_bytes(self.ctx.query_gid(self.port, index))
        gid_type: int | None = None
        with contextlib.suppress(self.v.error, AttributeError):
            gid_type = int(self.ctx.query_gid_type(self.port, index))
        return raw, gid_type

    def _pick_gid(self, table_len: int) -> tuple[int, bytes]:
        wanted = self.options.gid_index
        if wanted >= 0:
            try:
                raw, _ = self._gid_at(wanted)
            except self.v.error as exc:
                raise RdmaSetupError(f"GID index {wanted} of {self.name} port {self.port}: {exc}") from exc
            if raw == bytes(16):
                raise RdmaSetupError(f"GID index {wanted} of {self.name} port {self.port} is empty")
            return wanted, raw
        if not self.ethernet:
            return 0, self._gid_at(0)[0]
        v2 = self.v.e["IBV_GID_TYPE_SYSFS_ROCE_V2"]
        found: list[tuple[int, int, bytes]] = []  # (rank, index, gid): lower rank is better
        for index in range(table_len):
            try:
                raw, gid_type = self._gid_at(index)
            except self.v.error:
                continue
            if raw == bytes(16):
                continue
            rank = 2 if gid_type != v2 else (0 if is_ipv4_mapped(raw) else 1)
            found.append((rank, index, raw))
        if not found:
            raise RdmaSetupError(
                f"{self.name} port {self.port} has no usable GID (no IP address on its netdev?)"
            )
        rank, index, raw = min(found)
        if rank:
            log.warning(
                "RDMA %s: no RoCE v2 IPv4 GID, using GID index %d (%s)", self.name, index, gid_text(raw)
            )
        return index, raw

    def register(self, address: int, length: int, access: int) -> Any:
        """An MR over ``[address, address+length)``; RdmaSetupError when the device refuses it."""
        try:
            return self.v.mr.MR(self.pd, length, access, address=address)
        except self.v.error as exc:
            raise RdmaSetupError(f"cannot register {length} bytes on {self.name}: {exc}") from exc

    def close(self) -> None:
        """Release the PD and the context (objects created on them must be closed first)."""
        for obj in (self.pd, self.ctx):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        self.pd = self.ctx = None
