"""Object keys: namespace + SGLang's page hash + pool tag + rank suffix (DESIGN.md §3).

``{model}/{digest}[~{tenant}]/{page_hash}{pool_tag}{rank_suffix}`` where
- ``model`` is the served model name (``/`` replaced), or ``namespace.model`` from the YAML;
- ``digest`` covers everything that changes a page's bytes: layout, dtype, page size, bytes per
  page, layer/head geometry of the KV pool AND of every sidecar pool registered with it (Mamba
  state shapes, sliding-window, indexer and DeepSeek V4 pools), the I/O path (v1 parts vs flat
  legacy pages order bytes differently), the tenant salt and the key-format version. Incompatible
  runs therefore never read each other's bytes, even when they share a store: a model whose
  Mamba state or indexer geometry changed reads neither its old states nor its old KV pages.
  A model with no sidecar pool is keyed by its KV geometry alone;
- ``tenant`` is the tenant's name when it is not the default one (``""``): the store reads it back
  (``tenant_of_key``) for the tenants' shares, stats and ``admin clear --tenant``. A call may name
  another tenant than the backend's (``request_tenant``); its keys then get that tenant's digest
  and name (``KeySpace.for_tenant``);
- ``pool_tag`` is empty for the KV pool and ``.{pool}~{pool digest}`` for a sidecar pool (the
  pool's own geometry digest, so a sidecar registered after the first data call, which the model
  digest cannot cover, still never reads another geometry's objects);
- ``rank_suffix`` names the shard a rank holds: ``@tp{rank}of{size}`` unless the object is
  replicated across TP ranks (MLA KV and its replicated sidecars), plus ``@pp``/``@cp``/``@dcp``
  when those are split.

With head groups (SGLang's ``tp_lcm_size = L`` on an MHA model, ``sglang_adapter/cross_tp.py``) the KV pool's keys
carry no ``@tp``: a page is ``L`` objects ``{page key}@hg{g}of{L}``, and the digest covers the
model's whole head count (``head_num x tp_size``) and ``L`` instead of one rank's heads, so ranks
of every TP size that divides ``L`` read and write the same objects. Sidecar pools keep ``@tp``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any

import xxhash

from hicache_mooncake.native import check_page_keys, join_keys

KEY_FORMAT = "hm1"
MAX_PAGE_KEY_CHARS = 512
PAGE_KEY_RULE = f"a page key must be a non-empty string of at most {MAX_PAGE_KEY_CHARS} characters"


def page_key_ok(page_hash: object) -> bool:
    """Does ``KeySpace.key`` accept ``page_hash`` (a non-empty ``str`` of at most
    ``MAX_PAGE_KEY_CHARS`` characters)?"""
    return isinstance(page_hash, str) and 0 < len(page_hash) <= MAX_PAGE_KEY_CHARS


def bad_page_keys(page_hashes: Sequence[object]) -> list[int]:
    """Indices of the hashes ``KeySpace.key`` refuses (``page_key_ok``), in order; a batch in
    which every hash is fine (the usual call) costs one native pass (``check_page_keys``).
    Callers that serve a batch (the backend) make each refused hash a miss of its own and serve
    the rest."""
    first = check_page_keys(page_hashes, MAX_PAGE_KEY_CHARS)
    if first < 0:
        return []
    return [i for i, h in enumerate(page_hashes) if i >= first and not page_key_ok(h)]


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
    head_groups: int = 0
    """``tp_lcm_size`` when the KV pool is stored as head-group objects (``sglang_adapter/cross_tp.py``), else 0."""

    def suffix(self, replicated: bool | None = None) -> str:
        """The rank suffix of an object; ``replicated`` overrides ``replicated_kv`` (a sidecar
        that is TP-sharded under a replicated KV, e.g. a Mamba state under MLA)."""
        parts = []
        if not (self.replicated_kv if replicated is None else replicated):
            parts.append(f"@tp{self.tp_rank}of{self.tp_size}")
        if self.pp_size > 1:
            parts.append(f"@pp{self.pp_rank}of{self.pp_size}")
        if self.cp_size > 1:
            parts.append(f"@cp{self.cp_rank}of{self.cp_size}")
        if self.dcp_size > 1:
            parts.append(f"@dcp{self.dcp_rank}of{self.dcp_size}")
        return "".join(parts)

    def kv_suffix(self) -> str:
        """The KV pool's suffix: without ``@tp`` when pages are head-group objects (each object
        key then names its group: ``cross_tp.group_suffixes``)."""
        return self.suffix(True if self.head_groups else None)


@dataclass(frozen=True)
class KeySpace:
    prefix: str
    suffix: str
    tag: str = ""
    model: str = ""
    base: str = ""
    """The digest of the default tenant; another tenant's digest is derived from it."""

    def for_tenant(self, tenant: str) -> KeySpace:
        """The same pool's keys for another tenant (its own digest, so tenants never read each
        other's pages; its name in the key). The same for every backend of the model."""
        if tenant == tenant_of_key(self.prefix) or not self.base:
            return self
        return replace(self, prefix=f"{self.model}/{_tenant_digest(self.base, tenant)}/")

    def key(self, page_hash: str) -> str:
        if not page_key_ok(page_hash):
            raise ValueError(PAGE_KEY_RULE)
        return f"{self.prefix}{page_hash}{self.tag}{self.suffix}"

    def keys(self, page_hashes: list[str]) -> list[str]:
        """``key`` of each hash; the checks run as native passes over the batch (this is on
        every ``batch_exists``): one bad hash raises ``ValueError`` for the whole call. The
        backend takes bad hashes out first (``bad_page_keys``): each is a miss of its own."""
        if not page_hashes:
            return []
        if bad_page_keys(page_hashes):
            raise ValueError(PAGE_KEY_RULE)
        return self.checked_keys(page_hashes)

    def checked_keys(self, page_hashes: Sequence[str]) -> list[str]:
        """``keys`` of hashes the caller has checked already (``bad_page_keys`` found none: the
        backend's data calls, which make each refused hash a miss before they get here)."""
        return join_keys(self.prefix, page_hashes, self.tag + self.suffix)  # one native call


# Host-pool attributes that shape a page's bytes, across SGLang's pool classes: KV (MHA, MLA),
# Mamba state, DSA indexer, DeepSeek V4 paged and state pools. The KV fields are always part of the
# geometry (None when absent); the others only where the pool has them.
_GEOMETRY_FIELDS = (
    "layout",
    "page_size",
    "layer_num",
    "head_num",
    "head_dim",
    "kv_lora_rank",
    "qk_rope_head_dim",
)
_SIDECAR_GEOMETRY_FIELDS = (
    "kv_cache_dim",
    "num_mamba_layers",
    "temporal_state_shape",
    "conv_state_shapes",
    "temporal_dtype",
    "conv_dtype",
    "indexer_page_stride_size",
    "indexer_dtype",
    "item_bytes",
    "state_page_bytes",
    "slot_page_size",
)


def pool_geometry(pool: Any) -> dict[str, Any]:
    """The host-pool facts that determine a page's bytes (read defensively across releases)."""
    geometry: dict[str, Any] = {name: _plain(getattr(pool, name, None)) for name in _GEOMETRY_FIELDS}
    for name in _SIDECAR_GEOMETRY_FIELDS:
        value = getattr(pool, name, None)
        if value is not None:
            geometry[name] = _plain(value)
    geometry["dtype"] = str(getattr(pool, "dtype", None))
    geometry["pool_class"] = type(pool).__name__
    size_per_token = getattr(pool, "get_size_per_token", None)
    try:
        geometry["bytes_per_token"] = size_per_token() if callable(size_per_token) else None
    except Exception:  # a logical pool, or a class that cannot answer on this host
        geometry["bytes_per_token"] = getattr(pool, "size_per_token", None)
    side_states = getattr(pool, "slot_state_buffers", None) or ()
    if side_states:
        geometry["side_states"] = tuple((tuple(t.shape[1:]), str(t.dtype)) for t in side_states)
    return geometry


def _plain(value: Any) -> Any:
    """A stable repr-able form (torch sizes, dtypes and lists of them)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    return str(value)


def geometry_digest(geometry: Mapping[str, Any]) -> str:
    return xxhash.xxh64_hexdigest(repr(sorted(geometry.items())).encode())


def build_keyspace(
    model: str,
    tenant: str,
    geometry: dict[str, Any],
    io_path: str,
    ranks: RankInfo,
    sidecars: Mapping[str, dict[str, Any]] | None = None,
) -> KeySpace:
    """The KV pool's key space; ``sidecars`` (pool name -> geometry) joins the digest when any."""
    identity: dict[str, Any] = {**geometry, "io_path": io_path, "tenant": "", "format": KEY_FORMAT}
    if ranks.head_groups:
        identity.update(tp_independent_geometry(geometry, ranks))
    if sidecars:
        identity["sidecars"] = tuple(sorted((name, geometry_digest(g)) for name, g in sidecars.items()))
    base = xxhash.xxh64_hexdigest(repr(sorted(identity.items())).encode())
    model_slug = model.replace("/", "-") or "model"
    prefix = f"{model_slug}/{_tenant_digest(base, tenant)}/"
    return KeySpace(prefix=prefix, suffix=ranks.kv_suffix(), model=model_slug, base=base)


def tp_independent_geometry(geometry: Mapping[str, Any], ranks: RankInfo) -> dict[str, Any]:
    """The per-rank KV facts of ``geometry`` restated for the whole model (heads and bytes per
    token times ``tp_size``) plus the head-group count: the same at every TP size."""
    out: dict[str, Any] = {"head_groups": ranks.head_groups}
    for name in ("head_num", "bytes_per_token"):
        value = geometry.get(name)
        out[name] = value * ranks.tp_size if isinstance(value, int) else value
    return out


def _tenant_digest(base: str, tenant: str) -> str:
    """The digest segment of a tenant's keys: the default tenant's digest, salted and named."""
    return f"{xxhash.xxh64_hexdigest(f'{base}/{tenant}'.encode())}~{tenant}" if tenant else base


def tenant_of_key(key: str) -> str:
    """The tenant a key (or key prefix) belongs to (``""``: the default tenant)."""
    first = key.find("/")
    second = key.find("/", first + 1)
    if first < 0 or second < 0:
        return ""
    mark = key.find("~", first + 1, second)
    return key[mark + 1 : second] if mark >= 0 else ""


class TenantReader:
    """``tenant_of_key`` that remembers the key prefix it parsed last (``model/digest[~tenant]/``,
    up to the second ``/``: all a key's tenant depends on). The keys of one call share it, so
    each key after the first costs one ``startswith``, and ``many`` names a whole call's keys in
    C-level passes. Safe across threads: the remembered prefix and its tenant are replaced
    together, as one tuple."""

    def __init__(self) -> None:
        self._last = ("\0/\0/", "")  # what tenant_of_key says of every key starting so

    def __call__(self, key: str) -> str:
        prefix, tenant = self._last
        if key.startswith(prefix):
            return tenant
        tenant = tenant_of_key(key)
        second = key.find("/", key.find("/") + 1)
        if second > 0:
            self._last = (key[: second + 1], tenant)
        return tenant

    def many(self, keys: Sequence[str]) -> list[str]:
        """The tenant of each key, as ``self(key)`` of each says."""
        if not keys:
            return []
        first = self(keys[0])
        prefix, tenant = self._last
        if tenant == first and all(map(str.startswith, keys, repeat(prefix))):
            return [first] * len(keys)  # every key has the prefix the first one named
        return list(map(self, keys))


def tenant_reader() -> TenantReader:
    """A ``TenantReader`` (one per store: it remembers the prefix its store saw last)."""
    return TenantReader()


def request_tenant(extra_info: Any) -> str | None:
    """The tenant a caller names for one call: ``extra_info.extra_info["tenant"]`` (SGLang's
    ``HiCacheStorageExtraInfo``), else None.

    SGLang 0.5.23 passes no cache salt and no ``extra_key`` to the storage backend: it folds both into
    the page hashes (``storage_namespace_seed``), so requests with different salts already get
    different keys, but their tenant is not visible here. Its ``extra_info`` dict carries only a
    ``session_id`` (the Mooncake direct linker). A caller that knows the tenant (a router, the host
    cache client, a future SGLang) passes ``{"tenant": name}``; a test that reads SGLang's source
    fails when SGLang starts passing its salt, so it can be mapped here."""
    inner = getattr(extra_info, "extra_info", None)
    if isinstance(inner, dict):
        tenant = inner.get("tenant")
        if isinstance(tenant, str):
            return tenant
    return None


def sidecar_keyspace(
    kv: KeySpace, pool_name: str, geometry: dict[str, Any], ranks: RankInfo, replicated: bool
) -> KeySpace:
    """A sidecar pool's keys: the model's prefix, the pool tag, the pool's own rank suffix."""
    return KeySpace(
        prefix=kv.prefix,
        suffix=ranks.suffix(replicated),
        tag=f".{pool_name}~{geometry_digest(geometry)[:8]}",
        model=kv.model,
        base=kv.base,
    )
