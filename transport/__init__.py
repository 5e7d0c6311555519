"""Transport layer of hicache-mooncake: moves objects between processes and memory nodes.

Knows nothing of SGLang, tiers or the SSD engine (tiers/ provides the store a node serves).
Imports as ``hicache_mooncake.transport`` (pyproject maps the folder); one job per family:

- client side (this folder): ``node_client`` (``NodeClient``: batched calls on one node),
  ``cluster`` (``ClusterClient``: the same over all live nodes, rendezvous homes),
  ``connection`` (authenticated framed connections, pooled per node);
- transfer engines: ``engine`` (the ``TransferEngine`` contract), ``registry`` (name -> engine),
  ``tcp`` (bytes in the frames), ``local`` (same-host: the node's arena file mapped);
- ``rdma/``: the ``rdma`` engine (one-sided READ/WRITE through pyverbs) and the node's
  passive side of it (``rdma.responder``);
- ``node/``: the memory node, the server side: ``node.server`` (``NodeServer``),
  ``node.config`` (``NodeConfig``), ``node.served_store`` (the store protocol a node serves),
  ``node.handshake_gate`` and ``node.peer_cred`` (who gets in);
- ``metadata/``: node membership (embedded or Redis) and key homes;
- shared by both sides: ``wire`` (frames, ops, statuses), ``auth`` (the handshake's secret
  proof), ``sockio`` (bounded socket I/O), ``object_header`` (the header beside each body),
  ``arena_header`` / ``arena_files`` (the node arena file: created by a node, mapped by the
  ``local`` engine), ``errors``, ``options`` (``ClientOptions``), ``secret_file``, ``throttle``,
  ``processes`` (``pid_alive``), ``batch_copy`` (a batch of pages between local views and an
  arena or scratch buffer: one native ``copy_pages`` per local buffer, every range checked first).

Entry points: ``NodeClient(host, port, ClientOptions(...), engine="tcp"|"local"|"rdma")``,
``ClusterClient(metadata, ...)``, ``NodeServer(NodeConfig(...), store_factory, metadata)``,
``make_engine(name)``, ``metadata.make_metadata(MetadataConfig(...))``. Only this entry module
imports ``node/`` (to re-export ``NodeServer``, ``NodeConfig``): no client-side module or engine
does, and ``rdma/`` never does; ``node/`` takes ``rdma.options`` and, lazily, ``rdma.responder``.
"""

from .cluster import ClusterClient
from .engine import Segment, TransferEngine
from .errors import AuthError, MetadataUnavailable, PeerUnavailable, ProtocolError, TransportError
from .node.config import NodeConfig
from .node.server import NodeServer
from .node_client import NodeClient
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
