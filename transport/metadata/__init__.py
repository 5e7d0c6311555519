"""Cluster metadata of the ``nodes`` pool provider: node membership (TTL heartbeats), key homes
(rendezvous hashing) and object types.

Backends: ``embedded`` and ``redis``. There is no leader
election here: nothing in the node pool needs one coordinator (homes are computed by every client);
high availability of a pool comes from Mooncake Store's master HA (``tiers.remote.provider: mooncake``)."""

from .base import MetadataService, NodeInfo, ObjectDataType
from .config import MetadataConfig, make_metadata
from .embedded import EmbeddedMetadata
from .membership import Membership
from .rendezvous import home_of, rank_nodes, route

__all__ = [
    "EmbeddedMetadata",
    "Membership",
    "MetadataConfig",
    "MetadataService",
    "NodeInfo",
    "ObjectDataType",
    "home_of",
    "make_metadata",
    "rank_nodes",
    "route",
]
