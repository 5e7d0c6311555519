"""``MambaPoolHost``: one page is one state slot (``page_size`` 1): the temporal (SSM) state of every
Mamba layer, each conv state of every layer, and the slot's side states where the model registers
them (``slot_state_buffers``, e.g. ReplaySSM / KDA rows).

SGLang's ``get_page_buffer_meta`` covers the first two and refuses a pool with side states; we
address all three ourselves for page-first layouts (every slot's row is contiguous in each buffer),
so such models are stored zero-copy too. Without side states SGLang's own code computes the runs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from hicache_mooncake.sglang_adapter.host_pools.provider import PoolProvider, class_names, register_provider


@register_provider
class MambaStateProvider(PoolProvider):
    name: ClassVar[str] = "mamba"
    priority: ClassVar[int] = 20

    @classmethod
    def handles(cls, pool: Any) -> bool:
        return "MambaPoolHost" in class_names(pool)

    def page_runs(self, pool: Any, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        if not getattr(pool, "slot_state_buffers", None):
            meta_ptrs, meta_sizes = pool.get_page_buffer_meta(indices)
            return [int(p) for p in meta_ptrs], [int(s) for s in meta_sizes]
        if pool.layout not in ("page_first", "page_first_direct"):
            raise ValueError(f"Mamba state pages need a page-first layout, got {pool.layout}")
        buffers = [pool.temporal_buffer] if pool.temporal_buffer.numel() else []
        buffers += [*pool.conv_buffer, *pool.slot_state_buffers]
        rows = [(b.data_ptr(), b.stride(0) * b.element_size(), _row_bytes(b)) for b in buffers]
        ptrs: list[int] = []
        sizes: list[int] = []
        for slot in indices.tolist():
            for base, stride, nbytes in rows:
                ptrs.append(base + int(slot) * stride)
                sizes.append(nbytes)
        return ptrs, sizes


def _row_bytes(buffer: torch.Tensor) -> int:
    row = buffer[0]
    if not row.is_contiguous():
        raise ValueError("a Mamba state row is not contiguous in its host buffer")
    return int(row.numel() * row.element_size())
