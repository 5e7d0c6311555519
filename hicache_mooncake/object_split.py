"""Pages larger than the largest object a tier accepts are stored as several objects.

A Mamba state can outgrow a DRAM slab or an SSD region: Qwen3-Next's is about 72 MiB per slot at
TP1 (36 linear-attention layers of a 32 x 128 x 128 fp32 state), more than the default 64 MiB
slab. So can a KV page: 256 tokens x 80 layers x 8 KV heads x 128 x (K, V) in bf16 is 84 MB
(a 70B model at TP1 with 256-token pages). KV pages (``backend.py``) and sidecar pages
(``sglang_adapter/hybrid.py``) are cut the same way, here. Such a page is cut into ``n`` chunks of at most
``max_object_bytes`` (zero-copy: slices of the page's own memoryviews) stored under
``{key}#{i}of{n}``. A page exists only when all its
chunks do; the chunk count is part of every chunk key, so a page cut differently (another slab
size) is a miss, never a mix of two cuts. A page that fits keeps its plain key.

``PageCut`` is the whole rule for one pool: a page is first split into head-group objects where
the KV pool is stored by head groups (``sglang_adapter/cross_tp.py``: suffix ``@hg{g}of{L}``, one equal share of
the page's bytes each, in order), then each object into chunks as above (``...@hg{g}of{L}#{i}of{n}``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hicache_mooncake.transport.node.config import NodeConfig
from hicache_mooncake.transport.object_header import HEADER_SIZE

SSD_ENTRY_OVERHEAD = 2 * 4096  # a region's header and one entry header (ssd.options.max_object_bytes)


def max_object_bytes(config: Any) -> int:
    """The largest object every enabled tier of ``config`` accepts. A DRAM slot served to other
    processes (the host cache, a memory node) carries an object header after the payload, so a
    DRAM object is one header short of a slab whether or not this process serves its arena.

    The memory nodes of the pool (``tiers.remote`` with provider ``nodes``) store objects up to
    their ``node.slab_size``; a client reads it from the ``node:`` section of its own file (one
    file serves nodes and clients), or the nodes' default when the file has none. Every client
    must cut a page alike, or one never finds another's chunks; a node with a smaller slab
    refuses the larger chunks (``put_keys`` less ``put_stored`` in the remote tier's calls)."""
    tiers = config.tiers
    limits = []
    if tiers.dram.enabled:
        limits.append(int(tiers.dram.slab_size) - HEADER_SIZE)
    if tiers.ssd.enabled:
        limits.append(int(tiers.ssd.region_size) - SSD_ENTRY_OVERHEAD)
    if tiers.remote.enabled and tiers.remote.provider == "nodes":
        limits.append((config.node or NodeConfig()).max_object_bytes)
    return min(limits) if limits else 1 << 62


def chunk_count(nbytes: int, max_bytes: int) -> int:
    return max(1, -(-nbytes // max_bytes))


def chunk_keys(key: str, count: int) -> list[str]:
    return [key] if count == 1 else [f"{key}#{i}of{count}" for i in range(count)]


def chunked(keys: Sequence[str], count: int) -> list[str]:
    """The chunk keys of ``keys``, page after page (``keys`` themselves when ``count`` is 1)."""
    if count == 1:
        return list(keys)
    return [k for key in keys for k in chunk_keys(key, count)]


def whole(flags: Sequence[bool], count: int) -> list[bool]:
    """Per page, whether all of its ``count`` chunks' ``flags`` are true (``chunked``'s order)."""
    if count == 1:
        return list(flags)
    return [all(flags[i : i + count]) for i in range(0, len(flags), count)]


def split_pages(parts: Sequence[list[memoryview]], count: int) -> list[list[memoryview]]:
    """Each page's ``parts`` cut by :func:`split_parts`, page after page (``chunked``'s order)."""
    if count == 1:
        return list(parts)
    return [chunk for page in parts for chunk in split_parts(page, count)]


def split_parts(parts: Sequence[memoryview], count: int) -> list[list[memoryview]]:
    """``parts`` (one page) cut into ``count`` chunks of nearly equal size, in order."""
    if count == 1:
        return [list(parts)]
    total = sum(p.nbytes for p in parts)
    size = -(-total // count)
    chunks: list[list[memoryview]] = [[] for _ in range(count)]
    room, index = size, 0
    for part in parts:
        flat = part.cast("B") if part.format != "B" or part.ndim != 1 else part
        start = 0
        while start < flat.nbytes:
            if room == 0:
                index, room = index + 1, size
            take = min(room, flat.nbytes - start)
            chunks[index].append(flat[start : start + take])
            start += take
            room -= take
    return chunks


@dataclass(frozen=True)
class PageCut:
    """How one page becomes store objects, in order: for each of ``groups`` (key suffixes of the
    head-group objects; empty: the page is one object) an equal share of the page's bytes, each
    cut into ``count`` chunks. ``keys`` and ``parts`` list a batch's objects page after page."""

    count: int = 1
    groups: tuple[str, ...] = ()

    @property
    def per_page(self) -> int:
        return max(1, len(self.groups)) * self.count

    def keys(self, page_keys: Sequence[str]) -> list[str]:
        """The store keys of the objects of pages whose (whole-page) keys are ``page_keys``."""
        if not self.groups:
            return chunked(page_keys, self.count)
        return chunked([k + g for k in page_keys for g in self.groups], self.count)

    def parts(self, pages: Sequence[list[memoryview]]) -> list[list[memoryview]]:
        """Each page's ``parts`` cut into its objects (``keys``' order)."""
        if not self.groups:
            return split_pages(pages, self.count)
        share = len(self.groups)
        return split_pages([g for page in pages for g in split_parts(page, share)], self.count)
