"""Object key -> the block hash SGLang publishes for the same page (``BlockStored.block_hashes``).

Our object key is ``{model}/{digest}[~{tenant}]/{page_hash}{pool_tag}{rank_suffix}`` (``keys.py``);
``page_hash`` is the hex SHA-256 chain hash SGLang gave ``batch_set_v1``. SGLang's own events
publish ``hash_str_to_int64(page_hash)``: the first 16 hex digits as a signed 64-bit integer.
We publish the same integer, so a consumer that indexes SGLang's GPU/CPU events finds our DISK /
EXTERNAL / host-DRAM copies under the same ids. This holds for requests without ``extra_key``
(LoRA) and ``cache_salt``: for those SGLang namespaces its event hashes differently from the
storage hashes it hands us (``compute_node_event_hash_values``, and in the ``dynamo`` format
``namespaced_block_hash``), which the storage API does not let us recompute.

Which keys are published (``block_id`` is None for the others):
- the KV pool's objects only: a sidecar pool object (``pool_tag`` ``.{pool}~{digest}``: Mamba
  state, SWA window, indexer) shares its page hash with the KV page, and SGLang's events describe
  KV blocks;
- one shard per page: an object of TP/PP/CP/DCP rank 0 and head group 0 (``@hg0of{L}``, cross-TP
  sharing) or replicated across ranks (MLA), so the
  host cache service, which holds every rank's shard, reports each page once, as SGLang reports
  from its rank 0;
- a page stored as chunks (``object_split``: ``{key}#{i}of{n}``) is reported by its chunk 0.
A page key that does not start with 16 hex digits (not from SGLang: tools, tests) gets its xxh64 as
a signed int64: an opaque id, stable across processes.
"""

from __future__ import annotations

import re

import xxhash

_RANK = re.compile(r"(?:^|@)(tp|pp|cp|dcp|hg)(\d+)of\d+")
_POOL_TAG = re.compile(r"\.[^./~@]+~[0-9a-f]+$")
_FIRST_SHARD: dict[str, bool] = {}  # rank suffix -> is it the first shard (few distinct suffixes)


def signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def page_block_id(page_hash: str) -> int:
    """SGLang's ``hash_str_to_int64`` (the first 16 hex digits as a signed int64) for a page hash
    that starts with 16 hex digits; an xxh64-based id otherwise."""
    if len(page_hash) >= 16:
        try:
            return signed64(int(page_hash[:16], 16))
        except ValueError:
            pass
    return signed64(xxhash.xxh64_intdigest(page_hash.encode()))


def _first_shard(suffix: str) -> bool:
    known = _FIRST_SHARD.get(suffix)
    if known is None:
        known = all(match.group(2) == "0" for match in _RANK.finditer(suffix))
        if len(_FIRST_SHARD) < 4096:
            _FIRST_SHARD[suffix] = known
    return known


def block_id(key: str) -> int | None:
    """The published block hash of object ``key``; None for an object that is not published (a
    sidecar pool's object, a shard of a rank other than 0, a chunk other than the first)."""
    rest = key.split("/", 2)[-1]
    if "#" in rest:
        rest, chunk = rest.rsplit("#", 1)
        if not chunk.startswith("0of"):
            return None
    page, at, suffix = rest.partition("@")
    if at and not _first_shard(suffix):
        return None
    if not page or ("." in page and _POOL_TAG.search(page)):
        return None
    return page_block_id(page)
