"""``sglang:``: SGLang's own HiCache settings, kept in the same YAML as ours.

The backend does not apply this section (SGLang has sized its host pool and chosen its layout before
the backend exists); ``hicache-mooncake launch CONFIG -- ...`` turns it into SGLang's command-line
flags, checks the combination first, and ``config validate`` checks it offline. An SGLang started
without ``launch`` ignores it: the backend compares it at attach with what SGLang runs and logs each
difference once (``sglang_adapter.settings_check``). Each key is named
exactly as SGLang 0.5.23's ``ServerArgs`` field and becomes the flag ``--<key with dashes>``
(``tests/sglang/test_launch.py`` holds every key against SGLang's own argument parser, so a flag
SGLang renames fails CI). A key left out (None) is not passed: SGLang's default applies.

SGLang's storage prefetch thresholds are not flags: SGLang reads ``prefetch_threshold``,
``prefetch_timeout_base`` and ``prefetch_timeout_per_ki_token`` from the top level of this same
file (the backend's extra config), so they stay there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from hicache_mooncake.sizes import parse_size

GB = 1000**3
"""SGLang's ``--hicache-size`` unit."""

MemLayout = Literal["layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"]
IoBackend = Literal["direct", "kernel", "kernel_ascend"]
WritePolicy = Literal["write_back", "write_through", "write_through_selective"]
PrefetchPolicy = Literal["best_effort", "wait_complete", "timeout"]
HostMemoryMode = Literal["cache", "buffer_only"]


class SglangSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    hicache_ratio: float | None = Field(default=None, gt=0)
    """``--hicache-ratio``: SGLang's host pool (per rank) = this x its GPU KV pool (SGLang: 2.0 in
    ``cache`` mode). Set this or ``hicache_size``."""
    hicache_size: Annotated[int, BeforeValidator(parse_size), Field(gt=0)] | None = None
    """``--hicache-size``: SGLang's host pool per rank, a whole number of GB (10^9 bytes, e.g.
    ``32GB``); overrides any ratio. With it, ``launch`` can check the host-RAM split exactly."""
    hicache_host_memory_mode: HostMemoryMode | None = None
    """``--hicache-host-memory-mode``: ``cache`` (the host pool is SGLang's L2) or ``buffer_only``
    (a staging buffer in front of this backend)."""
    hicache_mem_layout: MemLayout | None = None
    """``--hicache-mem-layout``: layout of SGLang's host pool (SGLang: ``page_first``). Our zero-copy
    path moves a page as one run per K/V with ``page_first``, ``page_first_direct`` and ``page_head``."""
    hicache_io_backend: IoBackend | None = None
    """``--hicache-io-backend``: GPU <-> host copies (SGLang: ``kernel``; ``page_first_direct`` wants
    ``direct``)."""
    hicache_write_policy: WritePolicy | None = None
    """``--hicache-write-policy``: when SGLang backs pages up to this backend (SGLang:
    ``write_through``, on first insert; ``write_through_selective``: after 2 hits; ``write_back``: on
    eviction from the GPU)."""
    hicache_storage_prefetch_policy: PrefetchPolicy | None = None
    """``--hicache-storage-prefetch-policy``: when a prefetch from this backend stops (SGLang:
    ``timeout``, see ``prefetch_timeout_base``)."""
    hicache_storage_prefetch_retry_poll_interval: int | None = Field(default=None, ge=0)
    """``--hicache-storage-prefetch-retry-poll-interval``: scheduling passes before a missed
    storage check is re-issued (SGLang: 8; 0: no retries)."""
    hicache_storage_prefetch_retry_max_attempts: int | None = Field(default=None, ge=0)
    """``--hicache-storage-prefetch-retry-max-attempts``: re-issues per queued request (SGLang: 8)."""
    page_size: int | None = Field(default=None, ge=1)
    """``--page-size``: tokens per page, i.e. per object this backend stores (SGLang: chosen by its
    attention backend, often 1 or 64; 32-128 suits a storage tier)."""

    @field_validator("hicache_size")
    @classmethod
    def _whole_gb(cls, value: int | None) -> int | None:
        if value is not None and value % GB:
            raise ValueError(
                f"SGLang's --hicache-size takes whole GB (10^9 bytes): {value} bytes is "
                f"{value / GB:.2f}GB; write e.g. {max(value // GB, 1)}GB"
            )
        return value

    @model_validator(mode="after")
    def _one_size(self) -> SglangSection:
        if self.hicache_ratio is not None and self.hicache_size is not None:
            raise ValueError(
                "set hicache_ratio or hicache_size, not both (SGLang's size overrides the ratio)"
            )
        return self

    def flags(self) -> list[str]:
        """SGLang's command-line flags for the keys that are set, in field order."""
        out: list[str] = []
        for name in type(self).model_fields:
            value: Any = getattr(self, name)
            if value is None:
                continue
            if name == "hicache_size":
                value = value // GB
            out += [flag_of(name), str(value)]
        return out


def flag_of(field: str) -> str:
    """``hicache_mem_layout`` -> ``--hicache-mem-layout`` (SGLang's own spelling of its flags)."""
    return "--" + field.replace("_", "-")
