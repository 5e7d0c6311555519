"""Object keys: namespace + SGLang's page hash + rank suffix (DESIGN.md §3).

``{model}/{digest}/{page_hash}{rank_suffix}`` where
- ``model`` is the served model name (``/`` replaced), or ``namespace.model`` from the YAML;
- ``digest`` covers everything that changes a page's bytes: layout, dtype, page size, bytes per
  page, layer/head geometry, the I/O path (v1 parts vs flat legacy pages order bytes differently),
  the tenant salt and the key-format version. Incompatible runs therefore never read each
  other's bytes, even when they share a store;
- ``rank_suffix`` names the shard a rank holds: ``@tp{rank}of{size}`` unless the KV is replicated
  across TP ranks (MLA), plus ``@pp``/``@cp``/``@dcp`` when those are split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import xxhash

KEY_FORMAT = "hm1"
MAX_PAGE_KEY_CHARS = 512


@dataclass(frozen=True)
class RankInfo:
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    cp_rank: int = 0
    cp_size: int = 1
    dcp_rank: int = 0
    dcp_size: int = 1
    replicated_kv: bool = False

    def suffix(self) -> str:
        parts = []
        if not self.replicated_kv:
            parts.append(f"@tp{self.tp_rank}of{self.tp_size}")
        if self.pp_size > 1:
            parts.append(f"@pp{self.pp_rank}of{self.pp_size}")
        if self.cp_size > 1:
            parts.append(f"@cp{self.cp_rank}of{self.cp_size}")
        if self.dcp_size > 1:
            parts.append(f"@dcp{self.dcp_rank}of{self.dcp_size}")
        return "".join(parts)


@dataclass(frozen=True)
class KeySpace:
    prefix: str
    suffix: str

    def key(self, page_hash: str) -> str:
        if not isinstance(page_hash, str) or not 0 < len(page_hash) <= MAX_PAGE_KEY_CHARS:
            raise ValueError(f"page key must be a non-empty string of at most {MAX_PAGE_KEY_CHARS} chars")
        return f"{self.prefix}{page_hash}{self.suffix}"

    def keys(self, page_hashes: list[str]) -> list[str]:
        return [self.key(h) for h in page_hashes]


def pool_geometry(pool: Any) -> dict[str, Any]:
    """The host-pool facts that determine a page's bytes (read defensively across releases)."""
    fields = ("layout", "page_size", "layer_num", "head_num", "head_dim", "kv_lora_rank", "qk_rope_head_dim")
    geometry: dict[str, Any] = {name: getattr(pool, name, None) for name in fields}
    geometry["dtype"] = str(getattr(pool, "dtype", None))
    geometry["pool_class"] = type(pool).__name__
    size_per_token = getattr(pool, "get_size_per_token", None)
    geometry["bytes_per_token"] = size_per_token() if callable(size_per_token) else None
    return geometry


def build_keyspace(
    model: str, tenant: str, geometry: dict[str, Any], io_path: str, ranks: RankInfo
) -> KeySpace:
    identity = repr(sorted({**geometry, "io_path": io_path, "tenant": tenant, "format": KEY_FORMAT}.items()))
    digest = xxhash.xxh64_hexdigest(identity.encode())
    model_slug = model.replace("/", "-") or "model"
    return KeySpace(prefix=f"{model_slug}/{digest}/", suffix=ranks.suffix())
