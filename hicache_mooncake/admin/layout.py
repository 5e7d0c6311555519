"""What this rank stores and how its object keys are made: the report SGLang's
``/get_hicache_l3_cache_layout`` (and the startup ``hicache_object_layout``) gives for its own
``MooncakeStore``, and does not ask our backend for (it answers "Mooncake storage is not attached").

``backend_layout(backend)`` keeps SGLang's envelope, so a router that reads SGLang's reply reads
ours: ``{"enabled", "backend", "page_size", "hicache_object_layout": {"pools": [{"pool",
"suffixes", "hit_policy", ...}], "key_prefix", "is_mla_backend", "pp_rank", "pp_size"}, "reason"?}``
where an object key is ``key_prefix + page hash + suffix`` for each suffix of a pool (SGLang's
rule). Our additions, beside SGLang's fields: per pool the object kind, the page geometry (bytes
per page, parts and their bytes, layout, dtype, page size, layer count: ``keys.pool_geometry``),
the head groups and chunks a page is cut into; ``key_format`` (the template, its version, this
rank's suffixes, the tenant); ``tiers`` (name, kind, whether a lookup asks it without I/O).

It is built from the backend's state when asked (no cache): before SGLang registered its host
pools the key space is unknown and the report says so (``enabled: false`` with the reason), as
SGLang's does for a backend without pools. Reading it changes nothing and does no I/O.
"""

from __future__ import annotations

from typing import Any

from hicache_mooncake.keys import KEY_FORMAT, pool_geometry
from hicache_mooncake.object_split import PageCut, chunk_count, max_object_bytes
from hicache_mooncake.sglang_adapter.cross_tp import group_suffixes
from hicache_mooncake.sglang_adapter.host_pools.names import KV
from hicache_mooncake.sglang_adapter.host_pools.registered import RegisteredPool

BACKEND = "hicache-mooncake"
KEY_TEMPLATE = "{model}/{digest}[~{tenant}]/{page_hash}{pool_tag}{rank_suffix}[@hg{g}of{L}][#{i}of{n}]"
_TRAILING = {"mamba": 1}  # SGLang's default trailing window of a pool by name (swa: the model's)
_PROBE = "\x00"  # a stand-in page hash: the suffixes are what follows it in a key


def backend_layout(backend: Any) -> dict[str, Any]:
    """The report of ``backend`` (a ``HiCacheMooncakeBackend``); see the module docstring."""
    ranks = backend.ranks
    inner: dict[str, Any] = {
        "pools": [],
        "key_prefix": None,
        "is_mla_backend": bool(ranks.replicated_kv),
        "pp_rank": ranks.pp_rank,
        "pp_size": ranks.pp_size,
    }
    report: dict[str, Any] = {
        "enabled": False,
        "backend": BACKEND,
        "page_size": None,
        "hicache_object_layout": inner,
        "key_format": {
            "template": KEY_TEMPLATE,
            "version": KEY_FORMAT,
            "model": backend.model_name,
            "tenant": backend.config.namespace.tenant,
            "io_path": backend.io_path,
            "rank_suffix": ranks.kv_suffix(),
            "head_groups": ranks.head_groups,
        },
        "tiers": tiers_of(backend.store),
    }
    pools = backend.host_pools
    kv = pools.kv
    if kv is None or not pools.final or kv.keys is None:
        report["reason"] = "SGLang has not registered its host pools yet: the key space is not fixed"
        return report
    limit = max_object_bytes(backend.config)
    groups = group_suffixes(ranks.head_groups, ranks.tp_rank, ranks.tp_size)
    kv_cut = PageCut(chunk_count(kv.page_nbytes // max(1, len(groups)), limit), groups)
    inner["key_prefix"] = kv.keys.prefix
    inner["pools"].append(_pool(kv, kv_cut, ranks.replicated_kv))
    for name in pools.names():
        entry = pools.get(name)
        if name == KV or entry is None or entry.keys is None:
            continue
        cut = PageCut(chunk_count(entry.page_nbytes, limit) if entry.holds_bytes else 1)
        inner["pools"].append(_pool(entry, cut, ranks.replicated_kv and not entry.rank_sharded))
    report["enabled"] = True
    report["page_size"] = kv.page_size
    return report


def tiers_of(store: Any) -> list[dict[str, Any]]:
    local = (store.dram, store.ssd)
    return [
        {"name": t.name, "kind": type(t).__name__, "lookup_without_io": any(t is x for x in local)}
        for t in store.tiers
    ]


def _pool(entry: RegisteredPool, cut: PageCut, replicated: bool) -> dict[str, Any]:
    assert entry.keys is not None
    probe = cut.keys([entry.keys.key(_PROBE)]) if entry.holds_bytes else []
    suffixes = [key.split(_PROBE, 1)[1] for key in probe]
    policy = "trailing_pages" if entry.name in _TRAILING or entry.name.endswith("swa") else "all_pages"
    out: dict[str, Any] = {
        "pool": entry.name,
        "suffixes": suffixes,
        "hit_policy": policy,
        "object_kind": _kind(entry),
        "object_type": entry.obj_type.name.lower(),
        "replicated_across_tp": replicated,
        "holds_bytes": entry.holds_bytes,
        "page_bytes": entry.page_nbytes,
        "objects_per_page": len(suffixes),
        "head_groups": len(cut.groups),
        "chunks_per_object": cut.count,
        "geometry": pool_geometry(entry.pool),
    }
    if entry.name in _TRAILING:
        out["trailing_pages"] = _TRAILING[entry.name]
    if entry.holds_bytes:
        import torch  # only once SGLang registered its pools (torch is there); the CLI imports this module without it

        sizes = entry.provider.page_runs(entry.pool, torch.arange(entry.page_size, dtype=torch.int64))[1]
        out["parts_per_page"] = len(sizes)
        out["part_bytes"] = sorted(set(int(s) for s in sizes))
    return out


def _kind(entry: RegisteredPool) -> str:
    if entry.name != KV:
        return f"sidecar page ({entry.name}, v2 pool)"
    if not entry.holds_bytes:
        return "logical KV anchor (its sidecar pools hold the bytes)"
    if "MLA" in type(entry.pool).__name__:
        return "KV page, MLA: the latent KV only (no V part), the same on every TP rank"
    return "KV page, MHA: the K and V parts of this rank's heads (or head groups)"
