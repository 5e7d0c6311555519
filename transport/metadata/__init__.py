"""Cluster metadata: node membership (TTL heartbeats), key homes (rendezvous hashing), leader
election (lease + fencing token) and object types. Backends: ``embedded`` and ``redis``."""

from .base import MetadataService, NodeInfo, ObjectDataType
from .config import MetadataConfig, make_metadata
from .election import FencingGuard, LeaderLease
from .embedded import EmbeddedMetadata
from .membership import Membership
from .rendezvous import home_of, rank_nodes, route

__all__ = [
    "EmbeddedMetadata",
    "FencingGuard",
    "LeaderLease",
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
