"""Three patches that let SGLang 0.5.23's HTTP server run on a CPU-only machine, for the e2e tests only.

Python imports ``sitecustomize`` at start-up from ``sys.path``: the e2e harness puts this folder on the
server's ``PYTHONPATH``, so the patches reach every SGLang process, including the scheduler that SGLang
starts with multiprocessing "spawn" (a wrapper script would not). Nothing here runs on a machine with
a CUDA device (``scripts/gpu-e2e.sh`` runs the same tests against the unpatched server there), and
nothing runs unless ``HICACHE_E2E_CPU_PATCHES=1``.

Each patch is applied right after its SGLang module is imported (an import hook) and first checks
that SGLang still has the gap it fills: when an SGLang upgrade closes the gap or moves the code, the
check raises ``CpuPatchOutdated`` naming the patch, the server fails to start and the test says why.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

ENABLE_ENV = "HICACHE_E2E_CPU_PATCHES"


class CpuPatchOutdated(RuntimeError):
    """SGLang changed where a CPU patch applies: the patch is unnecessary or wrong; review it."""


def _require(condition: bool, patch: str, what: str) -> None:
    if not condition:
        raise CpuPatchOutdated(
            f"e2e CPU patch '{patch}': {what}. This SGLang changed the code the patch replaces: "
            "check whether the patch is still needed (tests/e2e/sglang_cpu_patches/sitecustomize.py)."
        )


# ---- patch 1: rotary embedding -------------------------------------------------------------------
def _patch_rotary(module: ModuleType) -> None:
    """SGLang's ``RotaryEmbedding.__init__`` takes a fallback kernel for every platform it does not
    list: on CUDA ``sglang.kernels.ops.attention.rope.rotary_embedding``, and when no platform flag
    is set (CPU without ``SGLANG_USE_CPU_ENGINE``) ``vllm._custom_ops``, which is not installed.
    ``_is_cpu`` marks the CPU path, which keeps the native torch forward. (SGLang's own CPU engine,
    ``SGLANG_USE_CPU_ENGINE=1``, sets it but then needs a CPU build of sgl_kernel.)"""
    _require(hasattr(module, "_is_cpu"), "rotary", "rotary_embedding.base has no _is_cpu flag")
    _require(module._is_cpu is False, "rotary", "SGLang already treats this host as CPU (patch unneeded)")
    source = inspect.getsource(module.RotaryEmbedding.__init__)
    _require(
        "vllm._custom_ops" in source and "_is_cpu" in source,
        "rotary",
        "RotaryEmbedding.__init__ no longer falls back to vllm._custom_ops unless _is_cpu",
    )
    module._is_cpu = True


# ---- patch 2: host pool pinning ------------------------------------------------------------------
def _patch_host_register(module: ModuleType) -> None:
    """On a GPU SGLang page-locks the HiCache host pool with ``cudaHostRegister``
    (``_cuda_host_register`` -> ``torch.cuda.cudart()``) so device<->host copies are DMA. Without a
    CUDA driver that call raises "Found no NVIDIA driver", and no flag turns pinning off: here the
    pool stays ordinary pageable memory (the copies are plain torch copies anyway, patch 3)."""
    original = getattr(module, "_cuda_host_register", None)
    _require(callable(original), "host_register", "pool_host.common has no _cuda_host_register")
    assert original is not None
    _require(
        "cudart" in inspect.getsource(original), "host_register", "_cuda_host_register no longer uses cudart"
    )
    _require(
        "_cuda_host_register(" in inspect.getsource(module.alloc_with_host_register),
        "host_register",
        "alloc_with_host_register no longer calls _cuda_host_register",
    )

    def _cuda_host_register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
        return None

    module._cuda_host_register = _cuda_host_register


# ---- patch 3: the direct io backend's device<->host copies ---------------------------------------
def transfer_kv_direct(
    src_layers: list[Any], dst_layers: list[Any], src_indices: Any, dst_indices: Any, page_size: int
) -> None:
    """layer_first: token rows ``src_indices`` of each source layer into rows ``dst_indices``."""
    for src, dst in zip(src_layers, dst_layers, strict=True):
        dst[dst_indices] = src[src_indices].to(dst.device)


def transfer_kv_all_layer_direct_lf_pf(
    src_ptrs: list[Any], dst_ptrs: list[Any], src_indices: Any, dst_indices: Any, page_size: int
) -> None:
    """Device (one tensor per layer, K layers then V layers) -> host page_first_direct
    (``[page, layer, slot, ...]`` per K and V): token ``t`` of the host pool is page ``t // page_size``,
    slot ``t % page_size``."""
    layers = len(src_ptrs) // len(dst_ptrs)
    pages, slots = dst_indices // page_size, dst_indices % page_size
    for j, dst in enumerate(dst_ptrs):
        for layer in range(layers):
            src = src_ptrs[j * layers + layer]
            dst[pages, layer, slots] = (
                src[src_indices].reshape(len(src_indices), *dst.shape[3:]).to(dst.device)
            )


def transfer_kv_per_layer_direct_pf_lf(
    src_ptrs: list[Any],
    dst_ptrs: list[Any],
    src_indices: Any,
    dst_indices: Any,
    layer_id: int,
    page_size: int,
    **_: Any,
) -> None:
    """Host page_first_direct -> device, one layer (the load path, layer by layer)."""
    pages, slots = src_indices // page_size, src_indices % page_size
    for src, dst in zip(src_ptrs, dst_ptrs, strict=True):
        dst[dst_indices] = (
            src[pages, layer_id, slots].reshape(len(src_indices), *dst.shape[1:]).to(dst.device)
        )


_DIRECT_OPS: dict[str, Callable[..., None]] = {
    "transfer_kv_direct": transfer_kv_direct,
    "transfer_kv_all_layer_direct_lf_pf": transfer_kv_all_layer_direct_lf_pf,
    "transfer_kv_per_layer_direct_pf_lf": transfer_kv_per_layer_direct_pf_lf,
}


def _round_trip_check() -> None:
    """The torch copies move every byte: device -> host page_first_direct -> device, exact."""
    import torch

    page, layers, heads, dim = 4, 2, 2, 3
    device = [torch.randn(16, heads, dim) for _ in range(2 * layers)]
    host = [torch.zeros(5, layers, page, heads, dim) for _ in range(2)]
    dev_idx = torch.tensor([4, 5, 6, 7, 12, 13, 14, 15])
    host_idx = torch.tensor([8, 9, 10, 11, 0, 1, 2, 3])
    transfer_kv_all_layer_direct_lf_pf(device, host, dev_idx, host_idx, page)
    back = [torch.zeros_like(t) for t in device]
    for layer in range(layers):
        transfer_kv_per_layer_direct_pf_lf(
            host, [back[layer], back[layers + layer]], host_idx, dev_idx, layer, page
        )
    for orig, got in zip(device, back, strict=True):
        _require(torch.equal(orig[dev_idx], got[dev_idx]), "direct_io", "torch round trip is not byte-exact")


def _patch_direct_io(module: ModuleType) -> None:
    """On CUDA/ROCm SGLang imports these copies from ``sgl_kernel.kvcacheio`` (CUDA kernels; XPU has
    its own wheel); on a CPU they are never bound and the first device<->host copy raises NameError.
    Here they are torch indexing copies with the same arguments (the ``direct`` io backend)."""
    for name in _DIRECT_OPS:
        _require(
            not hasattr(module, name),
            "direct_io",
            f"{module.__name__}.{name} is bound already (patch unneeded)",
        )
    if module.__name__.endswith(".mha"):
        load_src = inspect.getsource(module.MHATokenToKVPoolHost.load_to_device_per_layer)
        backup_src = inspect.getsource(module.MHATokenToKVPoolHost.backup_from_device_all_layer)
        _require(
            "layer_id=host_layer_id" in load_src and "transfer_kv_per_layer_direct_pf_lf(" in load_src,
            "direct_io",
            "load_to_device_per_layer calls transfer_kv_per_layer_direct_pf_lf differently",
        )
        _require(
            "src_ptrs=device_kv_buffers" in backup_src
            and "dst_ptrs=[self.k_buffer, self.v_buffer]" in backup_src,
            "direct_io",
            "backup_from_device_all_layer calls transfer_kv_all_layer_direct_lf_pf differently",
        )
    _round_trip_check()
    for name, func in _DIRECT_OPS.items():
        setattr(module, name, func)


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "sglang.srt.layers.rotary_embedding.base": _patch_rotary,
    "sglang.srt.mem_cache.pool_host.common": _patch_host_register,
    "sglang.srt.mem_cache.pool_host.mha": _patch_direct_io,
    "sglang.srt.mem_cache.pool_host.mla": _patch_direct_io,
}
APPLIED: list[str] = []


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self._inner, self._patch = inner, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._patch(module)
        APPLIED.append(module.__name__)


class _PatchFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target)  # type: ignore[attr-defined]
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def _install() -> None:
    if os.environ.get(ENABLE_ENV) != "1":
        return
    sys.meta_path.insert(0, _PatchFinder())


_install()
