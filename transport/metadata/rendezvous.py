"""Rendezvous (highest random weight) hashing: a key's home among the live nodes.

Every client computes the same home from the same membership with no round trip; when a node
leaves, only its keys move. ``route`` groups a batch by home so a batch costs one request per node.
"""

from __future__ import annotations

from collections.abc import Sequence

import xxhash

from .base import NodeInfo


def _score(node_id: str, key: str) -> int:
    return xxhash.xxh3_64_intdigest(key.encode(), seed=xxhash.xxh32_intdigest(node_id.encode()))


def rank_nodes(key: str, nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    """``nodes`` ordered by preference for ``key`` (home first, then fallbacks)."""
    return sorted(nodes, key=lambda n: _score(n.node_id, key), reverse=True)


def home_of(key: str, nodes: Sequence[NodeInfo]) -> NodeInfo | None:
    if not nodes:
        return None
    return max(nodes, key=lambda n: _score(n.node_id, key))


def route(keys: Sequence[str], nodes: Sequence[NodeInfo]) -> dict[str, list[int]]:
    """node_id -> indexes (into ``keys``) of the keys whose home it is."""
    out: dict[str, list[int]] = {}
    if not nodes:
        return out
    seeds = [(n.node_id, xxhash.xxh32_intdigest(n.node_id.encode())) for n in nodes]
    for i, key in enumerate(keys):
        raw = key.encode()
        best = max(seeds, key=lambda s: xxhash.xxh3_64_intdigest(raw, seed=s[1]))
        out.setdefault(best[0], []).append(i)
    return out
