"""The YAML schema of hicache-mooncake (pydantic v2). Every key, its default and its meaning.

One document carries SGLang's ``dynamic`` loader keys (``backend_name``, ``module_path``,
``class_name``, ``interface_v1``) next to ours, so ``--hicache-storage-backend dynamic
--hicache-storage-backend-extra-config @$(hicache-mooncake config path default)`` is the whole
setup. Unknown keys are refused (a typo never silently falls back to a default), except the keys
SGLang itself adds (``SGLANG_INJECTED_KEYS``). Sizes take ints (bytes) or strings such as
``64GiB`` / ``512MB``: one convention, SGLang's (GiB, MiB, KiB, TiB: powers of 1024; GB, MB, KB,
TB: powers of 1000); a bare ``G`` / ``M`` / ``K`` / ``T`` is refused naming both spellings.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from hicache_mooncake.sizes import parse_size
from hicache_mooncake.tiers.policy import policy_names

from .admin import AdminConfig
from .cluster import MetadataConfig, NodeSection, RemoteTierConfig
from .events import EventsConfig
from .host_cache import HostCacheConfig
from .metrics import MetricsConfig
from .sglang_section import SglangSection
from .ssd import SsdTierConfig
from .tenants import TenantsConfig, check_tenant_name
from .warm import WarmConfig

ByteSize = Annotated[int, BeforeValidator(parse_size), Field(ge=0)]

# Keys that SGLang itself consumes from the extra config. SGLang pops them before our class sees
# the dict, but a dict passed straight to the factory (tests, tools) still has them.
SGLANG_CONSUMED_KEYS = frozenset(
    {
        "prefetch_threshold",
        "prefetch_timeout_base",
        "prefetch_timeout_per_ki_token",
        "hicache_storage_pass_prefix_keys",
        "tp_lcm_size",
    }
)
# Keys that SGLang itself adds to the extra config before handing it to the backend (e.g.
# ``file_storage_path`` when started with ``--file-storage-path``; they configure SGLang's own
# ``file`` backend). Accepted and ignored, so such a launch works; every other unknown key is still
# refused. tests/unit/test_sglang_keys.py reads SGLang's source: a key SGLang starts adding (or
# consuming) that is not listed here fails CI.
SGLANG_INJECTED_KEYS = frozenset({"file_storage_path"})
LOADER_KEYS = frozenset({"backend_name", "module_path", "class_name", "interface_v1"})
LogLevel = Literal["unset", "DEBUG", "INFO", "WARNING", "ERROR", "debug", "info", "warning", "error"]


def _check_policy(name: str) -> str:
    known = policy_names()
    if name not in known:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(known)}")
    return name


# Keys of earlier versions: refused with what replaces them (a config migration note, not a typo).
_REMOVED_TIERS_KEYS = {
    "placement": "one placement path decides for every policy now; delete the key "
    "(per_tier behaviour: tiers.policy: s3fifo)",
}
_REMOVED_DRAM_KEYS = {
    "policy": "the DRAM tier has no policy of its own; use tiers.policy (one policy places pages over "
    "DRAM and SSD)",
    "policy_options": "use tiers.policy_options",
}


def _refuse_removed(data: Any, removed: dict[str, str]) -> Any:
    if isinstance(data, dict):
        for key, replacement in removed.items():
            if key in data:
                raise ValueError(f"{key!r} was removed: {replacement}")
    return data


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class DramTierConfig(StrictModel):
    """Local host-DRAM tier: a pre-allocated, page-aligned arena carved into size-class slabs."""

    enabled: bool = True
    """Local DRAM tier on/off (off: sets go straight to the next tier)."""
    capacity: ByteSize = parse_size("4GiB")
    """Bytes of the arena; allocated (and touched, see ``prefault``) when the backend attaches."""
    slab_size: ByteSize = parse_size("64MiB")
    """Arena granule given to one size class; the largest object one slot holds (less a 64-byte
    header): a larger KV page or sidecar state is stored as several chunks. Multiple of 4096."""
    prefault: bool = True
    """Fault the whole arena in from attach on, in a background thread, so the first sets do not
    pay for it; attach does not wait for it."""
    max_capacity: ByteSize | None = None
    """The most ``hicache-mooncake admin resize dram`` may grow the arena to (address space reserved
    at attach, memory used only when grown); None: ``capacity``."""

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        return _refuse_removed(data, _REMOVED_DRAM_KEYS)

    @model_validator(mode="after")
    def _check(self) -> DramTierConfig:
        if self.slab_size <= 0 or self.slab_size % 4096:
            raise ValueError(f"slab_size must be a positive multiple of 4096, got {self.slab_size}")
        if self.enabled and self.capacity < self.slab_size:
            raise ValueError(f"capacity ({self.capacity}) must be at least one slab_size ({self.slab_size})")
        if self.max_capacity is not None and self.max_capacity < self.capacity:
            raise ValueError(
                f"max_capacity ({self.max_capacity}) must be at least capacity ({self.capacity})"
            )
        return self


class TiersConfig(StrictModel):
    policy: str = "reuse"
    """The ONE policy that places pages over the local tiers: which pages leave the host, and DRAM holds
    the most recently used of the rest (``reuse``, ``lru``, ``s3fifo``, ``chain``, ``tinylfu``)."""
    policy_options: dict[str, Any] = Field(default_factory=dict)
    """Keyword options of ``tiers.policy``."""
    type_aware_eviction: bool = True
    """Sidecar objects of hybrid models that are only useful at the end of a cached prefix (Mamba
    states, sliding windows, compressor states) go first once a later one of the same chain is
    stored (needs SGLang's ``hicache_storage_pass_prefix_keys``); ``false``: the policy alone."""
    host_cache: Literal["auto", "on", "off"] = "auto"
    """Where these tiers live. ``on``: in the host cache, one service per host shared by every SGLang
    process of the host (started by the first backend; see ``host_cache:``); ``off``: in this process;
    ``auto``: on for MLA models at TP > 1 (ranks share one copy) and whenever the named host cache is
    already running, off otherwise (one TP1 process keeps its cheap in-process tiers)."""
    dram: DramTierConfig = DramTierConfig()
    remote: RemoteTierConfig = RemoteTierConfig()
    ssd: SsdTierConfig = SsdTierConfig()
    warm: WarmConfig = WarmConfig()

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        return _check_policy(name)

    @field_validator("host_cache", mode="before")
    @classmethod
    def _yaml_boolean(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted on / off (yes / no) as a boolean: take it as the word written
        if isinstance(value, bool):
            return "on" if value else "off"
        return value

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        return _refuse_removed(data, _REMOVED_TIERS_KEYS)


class NamespaceConfig(StrictModel):
    """What goes into every object key besides SGLang's page hash (DESIGN.md §3)."""

    model: str | None = None
    """Model identity in keys; default: SGLang's served model name."""
    tenant: str = ""
    """The tenant of this backend's pages: separates caches sharing one store (their keys carry it), and
    names it in ``tenants.shares``, the per-tenant stats and ``admin clear --tenant``."""

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, name: str) -> str:
        return check_tenant_name(name)


class IoConfig(StrictModel):
    timeout_s: float = Field(default=5.0, gt=0)
    """Upper bound of any blocking tier call; past it a get is a miss and a set is refused."""
    max_batch_pages: int = Field(default=128, ge=1)
    """Pages per store call. A v1 get/set with more pages is refused as malformed (SGLang sends at
    most 128); existence queries (SGLang 0.5.23 asks for a whole request at once) and v2 sidecar
    transfers are split into calls of this many pages."""


class BackendConfig(StrictModel):
    """The whole document. Loader keys first, then SGLang's own keys, then ours."""

    backend_name: str = "hicache-mooncake"
    """SGLang dynamic loader: a label for SGLang's logs."""
    module_path: str = "hicache_mooncake.backend"
    """SGLang dynamic loader: the module that holds the backend class."""
    class_name: str = "HiCacheMooncakeBackend"
    """SGLang dynamic loader: the HiCacheStorage subclass to construct."""
    interface_v1: int = Field(default=1, ge=0, le=1)
    """1: SGLang uses the zero-copy batch_get_v1/batch_set_v1 path (recommended)."""

    prefetch_threshold: int | None = None
    """SGLang's own (consumed before we see the config): minimum prefetch hit in tokens (SGLang: 256)."""
    prefetch_timeout_base: float | None = None
    """SGLang's own: base prefetch timeout in s (SGLang: 1)."""
    prefetch_timeout_per_ki_token: float | None = None
    """SGLang's own: extra prefetch timeout per 1024 tokens (SGLang: 0.25)."""
    hicache_storage_pass_prefix_keys: bool | None = None
    """SGLang's own: pass each call's prefix page hashes (policies then see chain parents)."""
    tp_lcm_size: int | None = None
    """SGLang's own: the least common multiple of the TP sizes sharing the store. Set, an MHA page is
    stored as ``tp_lcm_size`` head-group objects that ranks of every TP size dividing it share
    (``sglang_adapter/cross_tp.py``); a ``tp_size`` that does not divide it is refused at attach. MLA: no change."""

    config_file: str | None = None
    """Inline (JSON) extra config may point at a YAML file; its keys are the base, inline keys win."""

    namespace: NamespaceConfig = NamespaceConfig()
    tiers: TiersConfig = TiersConfig()
    io: IoConfig = IoConfig()
    metrics: MetricsConfig = MetricsConfig()
    admin: AdminConfig = AdminConfig()
    events: EventsConfig = EventsConfig()
    """KV events for routers: what the tiers store and drop, in SGLang's event format (off by default)."""
    tenants: TenantsConfig = TenantsConfig()
    log_level: LogLevel = "unset"
    """Level of the ``hicache_mooncake`` loggers; ``unset``: follow SGLang's ``--log-level``."""
    host_cache: HostCacheConfig = HostCacheConfig()
    """The host cache service (``tiers.host_cache``): where it lives, how it starts and stops."""
    metadata: MetadataConfig = MetadataConfig()
    """Cluster metadata (membership of memory nodes): embedded or redis. Used by tiers.remote."""
    node: NodeSection | None = None
    """Memory-node settings, read by ``hicache-mooncake node``; ignored by the backend."""
    sglang: SglangSection | None = None
    """SGLang's own HiCache flags, read by ``hicache-mooncake launch`` (and ``config validate``);
    ignored by the backend."""

    @model_validator(mode="before")
    @classmethod
    def _drop_sglang_injected_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and not SGLANG_INJECTED_KEYS.isdisjoint(data):
            return {k: v for k, v in data.items() if k not in SGLANG_INJECTED_KEYS}
        return data
