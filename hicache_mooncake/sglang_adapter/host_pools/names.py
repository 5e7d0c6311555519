"""What SGLang's pool names (``PoolName`` values) mean for the store: the object type of a page of
that pool, and whether a pool's pages differ between TP ranks when the model's KV does not."""

from __future__ import annotations

from typing import Any

from hicache_mooncake.sglang_adapter.host_pools.provider import class_names
from hicache_mooncake.tiers.policy import ObjectType

KV = "kv"
_TYPES = {
    KV: ObjectType.KV_PAGE,
    "mamba": ObjectType.MAMBA_STATE,
    "swa": ObjectType.SWA_WINDOW,
    "auxiliary_swa": ObjectType.SWA_WINDOW,
    "draft_swa": ObjectType.SWA_WINDOW,
    "indexer": ObjectType.INDEXER,
    "draft_indexer": ObjectType.INDEXER,
    "draft": ObjectType.DRAFT_KV,
}
# Host pools whose pages are split across TP ranks (heads or state channels), whatever the model.
_RANK_SHARDED_CLASSES = {"MambaPoolHost", "MHATokenToKVPoolHost", "MHATokenToKOnlyPoolHost"}


def pool_name(name: Any) -> str:
    """The plain value of a ``PoolName`` (a str enum whose hash differs from its value's)."""
    return str(getattr(name, "value", name))


def object_type_for(name: str) -> ObjectType:
    if name in _TYPES:
        return _TYPES[name]
    if name.startswith("deepseek_v4_"):
        if name.endswith("_state"):
            return ObjectType.COMPRESS_STATE
        return ObjectType.INDEXER if "indexer" in name else ObjectType.COMPRESSED_KV
    return ObjectType.SIDECAR


def rank_sharded(name: str, pool: Any) -> bool:
    """True when every TP rank holds different bytes for a page of this pool even if the model's KV
    is replicated (MLA): Mamba/KDA state (SGLang backs it up on every rank), MHA-class pools (a
    draft or SWA pool with split heads). Their keys always carry the TP rank."""
    return name == "mamba" or bool(class_names(pool) & _RANK_SHARDED_CLASSES)
