"""MHA pages shared across TP sizes: SGLang's ``tp_lcm_size`` as head-group objects.

SGLang's ``tp_lcm_size = L`` is the least common multiple of the TP sizes that share a store
(prefill and decode instances, instances scaled separately). A rank at TP size ``T`` (``T``
divides ``L``) holds ``head_num`` KV heads of the model's ``head_num x T``. With ``L`` set, an MHA
page is stored as ``L`` objects, one per head group of ``head_num x T / L`` heads, under a key
without the TP rank: ``{page key}@hg{g}of{L}``. A rank at TP size ``T`` and rank ``r`` reads and
writes the groups ``r x L/T .. (r+1) x L/T - 1``: the heads it holds. So a page written at TP=1 is
found by every rank at TP=2 or 4 (each reads its groups), and the reverse (TP=1 reads the groups
the TP=4 ranks wrote; a page counts only when all its groups are present).

An object's bytes do not depend on the TP size: for K then V, the group's heads of the page
in the host pool's layout order (the layout's dimensions with the head dimension narrowed to the
group), C order. The layout (and dtype, page size, layers, head dim) is in the key digest, so
instances share pages when they run the same host layout. Where a group is contiguous in the
host pool (``page_head``; ``page_first`` and ``page_first_direct`` when a rank holds one group),
objects are views of the pool (zero copy); elsewhere a set gathers each page into a staging
buffer and a get scatters it back (numpy strided copies, one per page and K/V).

Refused at attach (``ConfigError`` naming ``tp_lcm_size``): an ``L`` that is not a positive
multiple of ``tp_size``, the legacy copy path (``interface_v1: 0``), and at registration a host
pool that is not SGLang's MHA host pool in a layout listed in ``LAYOUTS``, or whose heads do not
split into ``L / tp_size`` groups. A rank-replicated KV (MLA) already shares pages across TP
sizes: ``L`` changes nothing for it. Sidecar pools (hybrid models) keep their per-rank keys, and
their geometry is in the KV digest, so the KV of a hybrid model does not cross TP sizes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hicache_mooncake.config.errors import ConfigError
from hicache_mooncake.sglang_adapter.host_pool_views import HostRangeError
from hicache_mooncake.sglang_adapter.host_pools.provider import class_names

# SGLang's MHA host layouts whose page a head group can be cut from (``_grouped``).
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
STAGING_KEEP_BYTES = 64 << 20
"""A thread keeps its staging buffer up to this size (larger batches stage in a fresh one)."""


def head_groups_for(tp_lcm_size: Any, tp_size: int, replicated_kv: bool, interface_v1: bool) -> int:
    """The head-group count ``L`` to store MHA pages by (0: per-rank objects, today's keys).
    Raises ``ConfigError`` naming ``tp_lcm_size`` for a value this rank cannot use."""
    if tp_lcm_size in (None, 0):
        return 0
    if isinstance(tp_lcm_size, bool) or not isinstance(tp_lcm_size, int) or tp_lcm_size < 1:
        raise ConfigError(f"tp_lcm_size must be a positive integer, got {tp_lcm_size!r}")
    if replicated_kv:
        return 0  # MLA: one copy for every rank of every TP size already
    if tp_lcm_size % tp_size:
        raise ConfigError(
            f"tp_lcm_size={tp_lcm_size} is not a multiple of tp_size={tp_size}: a rank holds a whole "
            f"number of head groups only when tp_size divides tp_lcm_size (set tp_lcm_size to the "
            f"least common multiple of the TP sizes that share the store)"
        )
    if not interface_v1:
        raise ConfigError(
            f"tp_lcm_size={tp_lcm_size} needs interface_v1: 1 (head-group objects are cut from the "
            f"host pool; the legacy flat-page path cannot share pages across TP sizes)"
        )
    return tp_lcm_size


def group_suffixes(head_groups: int, tp_rank: int, tp_size: int) -> tuple[str, ...]:
    """Key suffixes of the head groups rank ``tp_rank`` of ``tp_size`` holds, in head order."""
    per = head_groups // tp_size
    return tuple(f"@hg{g}of{head_groups}" for g in range(tp_rank * per, (tp_rank + 1) * per))


@dataclass
class HeadGroupPages:
    """The head-group objects of an MHA host pool's pages (``local`` groups per page, in order).

    ``set_parts``/``get_parts`` give each page's bytes as one list of byte views whose
    concatenation is the page's group objects back to back (``object_split.PageCut`` cuts it);
    ``get_parts``' second value writes what was read into the pool (a no-op when zero copy)."""

    local: int
    page_size: int
    views: tuple[np.ndarray, np.ndarray]
    """K and V as ``[page, group, *rest]`` uint8 views of the pool (``rest``: one group's page)."""
    zero_copy: bool
    _kept: threading.local = field(default_factory=threading.local, repr=False)

    @classmethod
    def of(cls, pool: Any, head_groups: int, tp_size: int) -> HeadGroupPages:
        """Raises ``ConfigError`` when ``pool`` cannot be cut into ``head_groups / tp_size`` groups."""
        local = head_groups // tp_size
        if "MHATokenToKVPoolHost" not in class_names(pool):
            raise ConfigError(
                f"tp_lcm_size={head_groups}: the KV host pool is {type(pool).__name__}, not SGLang's "
                f"MHATokenToKVPoolHost; head groups are cut from MHA pools only"
            )
        layout = getattr(pool, "layout", None)
        if layout not in LAYOUTS:
            raise ConfigError(
                f"tp_lcm_size={head_groups}: host layout {layout!r} is not supported for head groups "
                f"(supported: {', '.join(LAYOUTS)})"
            )
        heads, ps = int(pool.head_num), int(pool.page_size)
        if heads % local:
            raise ConfigError(
                f"tp_lcm_size={head_groups}: this rank's {heads} KV heads do not split into "
                f"{local} groups (tp_lcm_size / tp_size); choose a tp_lcm_size that divides the "
                f"model's KV heads"
            )
        kv = pool.kv_buffer
        if not isinstance(kv, torch.Tensor) or kv.device.type != "cpu" or not kv.is_contiguous():
            raise ConfigError(
                f"tp_lcm_size={head_groups}: the KV host buffer is not one contiguous host tensor"
            )
        raw = kv.detach().view(torch.uint8).numpy()  # [2, ..., head_dim x itemsize]
        try:
            views = tuple(_grouped(raw[i], layout, ps, local) for i in range(2))
        except ValueError as exc:  # a token count that is not whole pages
            raise ConfigError(
                f"tp_lcm_size={head_groups}: the KV host buffer is not whole pages: {exc}"
            ) from exc
        zero_copy = views[0][0, 0].flags.c_contiguous and views[1][0, 0].flags.c_contiguous
        return cls(local, ps, (views[0], views[1]), bool(zero_copy))

    def page_numbers(self, values: np.ndarray, pages: int) -> np.ndarray:
        """Pool page of each page's host indices (checked in range by the caller); a page whose
        first index is not page-aligned raises ``HostRangeError``."""
        firsts = values[:: self.page_size][:pages]
        if len(firsts) and (firsts % self.page_size).any():
            raise HostRangeError("a page's host indices are not page-aligned")
        return firsts // self.page_size

    def set_parts(self, page_numbers: Sequence[int]) -> list[list[memoryview]]:
        if self.zero_copy:
            return [self._pool_parts(p) for p in page_numbers]
        staging = self._staging(len(page_numbers))
        k, v = self.views
        for n, p in enumerate(page_numbers):
            out = staging[n]
            np.copyto(out[:, 0].reshape(k.shape[1:]), k[p])
            np.copyto(out[:, 1].reshape(v.shape[1:]), v[p])
        return [[staging[n].reshape(-1).data] for n in range(len(page_numbers))]

    def get_parts(
        self, page_numbers: Sequence[int]
    ) -> tuple[list[list[memoryview]], Callable[[Sequence[bool]], None]]:
        if self.zero_copy:
            return [self._pool_parts(p) for p in page_numbers], _nothing
        staging = self._staging(len(page_numbers))
        k, v = self.views
        pages = list(page_numbers)

        def scatter(done: Sequence[bool]) -> None:
            for n, (p, ok) in enumerate(zip(pages, done, strict=True)):
                if ok:
                    np.copyto(k[p], staging[n][:, 0].reshape(k.shape[1:]))
                    np.copyto(v[p], staging[n][:, 1].reshape(v.shape[1:]))

        return [[staging[n].reshape(-1).data] for n in range(len(pages))], scatter

    def _staging(self, pages: int) -> np.ndarray:
        """``[page, group, K/V, bytes]``: a page's groups back to back, each K then V. The calling
        thread's buffer is reused up to ``STAGING_KEEP_BYTES`` (a fresh one costs a page fault
        per 4 KiB); a call's views are used only within that call, on its thread."""
        half = int(np.prod(self.views[0].shape[2:]))
        shape = (pages, self.local, 2, half)
        nbytes = pages * self.local * 2 * half
        if nbytes > STAGING_KEEP_BYTES:
            return np.empty(shape, dtype=np.uint8)
        kept: np.ndarray | None = getattr(self._kept, "buffer", None)
        if kept is None or kept.nbytes < nbytes:
            kept = self._kept.buffer = np.empty(max(nbytes, 1 << 20), dtype=np.uint8)
        return kept[:nbytes].reshape(shape)

    def _pool_parts(self, page: int) -> list[memoryview]:
        k, v = self.views
        return [
            part
            for g in range(self.local)
            for part in (k[page, g].reshape(-1).data, v[page, g].reshape(-1).data)
        ]


def _nothing(_done: Sequence[bool]) -> None:
    return None


def _grouped(buf: np.ndarray, layout: str, page_size: int, groups: int) -> np.ndarray:
    """One of K/V of an MHA host buffer as a ``[page, group, *rest]`` view (no copy)."""
    if layout == "layer_first":  # [layer, size, H, Db]
        layers, size, heads, width = buf.shape
        view = buf.reshape(layers, size // page_size, page_size, groups, heads // groups, width)
        page_axis, group_axis = 1, 3
    elif layout == "page_first":  # [size, layer, H, Db]
        size, layers, heads, width = buf.shape
        view = buf.reshape(size // page_size, page_size, layers, groups, heads // groups, width)
        page_axis, group_axis = 0, 3
    elif layout == "page_first_direct":  # [page, layer, ps, H, Db]
        pages, layers, ps, heads, width = buf.shape
        view = buf.reshape(pages, layers, ps, groups, heads // groups, width)
        page_axis, group_axis = 0, 3
    else:  # page_head: [page, H, ps, layer, Db]
        pages, heads, ps, layers, width = buf.shape
        view = buf.reshape(pages, groups, heads // groups, ps, layers, width)
        page_axis, group_axis = 0, 1
    return np.moveaxis(view, (page_axis, group_axis), (0, 1))
