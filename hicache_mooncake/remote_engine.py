"""The transfer engine of the remote tier, as ``tiers.remote`` configures it, with its fallback.

``engine: rdma`` on a host where RDMA cannot run (no device, no pyverbs, a port or GID that cannot
be opened) uses TCP when ``tiers.remote.rdma.fallback`` is ``tcp`` (the default), saying so once
in the log; with ``none`` the attach is refused with the reason and the key to change.
"""

from __future__ import annotations

import logging

from hicache_mooncake.config.cluster import RemoteTierConfig
from hicache_mooncake.transport.engine import TransferEngine
from hicache_mooncake.transport.errors import TransportError
from hicache_mooncake.transport.registry import make_engine

log = logging.getLogger(__name__)


def open_remote_engine(remote: RemoteTierConfig) -> TransferEngine:
    if remote.engine != "rdma":
        return make_engine(remote.engine)
    try:
        return make_engine("rdma", options=remote.rdma.options())
    except TransportError as exc:
        if remote.rdma.fallback == "tcp":
            log.warning(
                "tiers.remote.engine: rdma is unavailable on this host (%s); the remote tier uses TCP "
                "(tiers.remote.rdma.fallback: tcp)",
                exc,
            )
            return make_engine("tcp")
        raise ValueError(
            f"tiers.remote.engine: rdma is unavailable on this host: {exc} "
            "(tiers.remote.rdma.fallback is 'none'; set it to 'tcp' to use TCP instead)"
        ) from None
