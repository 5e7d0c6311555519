"""Transport layer of hicache-mooncake: moves objects between processes and memory nodes.

Knows nothing of SGLang, tiers or the SSD engine. Entry points:

- ``NodeClient(host, port, ClientOptions(...), engine="tcp"|"local"|"rdma")``: batched
  ``exists_batch`` / ``put_batch`` / ``get_batch_into`` / ``remove_batch`` / ``clear`` / ``stats``
  against one memory node;
- ``ClusterClient(metadata, ...)``: the same over all live nodes (rendezvous homes);
- ``NodeServer(NodeConfig(...), store_factory, metadata)``: a memory node serving a
  ``ServedStore`` (``served_store.py``; tiers/ provides the store), over TCP or a Unix socket;
- ``make_engine(name)``: a ``TransferEngine``; ``metadata.make_metadata(MetadataConfig(...))``.
"""

from .cluster import ClusterClient
from .engine import Segment, TransferEngine
from .errors import AuthError, MetadataUnavailable, PeerUnavailable, ProtocolError, TransportError
from .node_client import NodeClient
from .node_config import NodeConfig
from .node_server import NodeServer
from .options import ClientOptions
from .registry import engine_names, make_engine, register_engine
from .wire import Limits

__all__ = [
    "AuthError",
    "ClientOptions",
    "ClusterClient",
    "Limits",
    "MetadataUnavailable",
    "NodeClient",
    "NodeConfig",
    "NodeServer",
    "PeerUnavailable",
    "ProtocolError",
    "Segment",
    "TransferEngine",
    "TransportError",
    "engine_names",
    "make_engine",
    "register_engine",
]
