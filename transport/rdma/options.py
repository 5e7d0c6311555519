"""Settings of one RDMA port (client engine or node responder), with defaults for a RoCE v2 fabric.

``gid_index=-1`` picks the GID automatically: on Ethernet (RoCE) the first RoCE v2 GID holding an
IPv4-mapped address (routable, what every RoCE v2 fabric uses), else the first RoCE v2 GID, else
the first valid one; on InfiniBand index 0. ``hop_limit`` 64 lets packets cross routers (1, the
verbs default, confines RoCE v2 to one L2 segment). ``traffic_class`` / ``service_level`` 0 ride the
fabric's default class; set them to the fabric's lossless RoCE class where one is configured (e.g.
traffic class 106 = DSCP 26 with ECN).
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class RdmaOptions:
    device: str = ""  # "" / "auto": the first device libibverbs lists
    port: int = 1
    gid_index: int = -1  # -1: automatic (see the module docstring)
    hop_limit: int = 64
    traffic_class: int = 0
    service_level: int = 0
    ack_timeout: int = 14  # local ACK timeout: 4.096 us * 2**ack_timeout per try
    retry_cnt: int = 7  # transport retries before RETRY_EXC_ERR
    rnr_retry: int = 7
    queue_depth: int = 128  # send-queue depth per QP, capped by the device's max_qp_wr
    max_sge: int = 16  # scatter/gather entries per work request, capped by the device
    max_rd_atomic: int = 16  # outstanding RDMA READs per QP, capped by both devices
    qps_per_node: int = 4  # concurrent calls per node (each call owns one QP while it runs)
    scratch_bytes: int = 8 * MiB  # registered bounce memory (object headers, unregistered buffers)
    poll_max_sleep_s: float = 0.0002  # the completion poller's longest back-off sleep

    def __post_init__(self) -> None:
        checks = (
            (self.port >= 1, "port must be >= 1"),
            (self.gid_index >= -1, "gid_index must be >= 0 (or -1 for auto)"),
            (0 <= self.hop_limit <= 255, "hop_limit must be 0..255"),
            (0 <= self.traffic_class <= 255, "traffic_class must be 0..255"),
            (0 <= self.service_level <= 15, "service_level must be 0..15"),
            (0 <= self.ack_timeout <= 31, "ack_timeout must be 0..31"),
            (0 <= self.retry_cnt <= 7 and 0 <= self.rnr_retry <= 7, "retry counts must be 0..7"),
            (self.queue_depth >= 2 and self.max_sge >= 1, "queue_depth >= 2 and max_sge >= 1"),
            (self.max_rd_atomic >= 1 and self.qps_per_node >= 1, "max_rd_atomic, qps_per_node >= 1"),
            (self.scratch_bytes >= 64 << 10, "scratch_bytes must be >= 64 KiB"),
        )
        for ok, what in checks:
            if not ok:
                raise ValueError(f"RDMA option: {what}")
