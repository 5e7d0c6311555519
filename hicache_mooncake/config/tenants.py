"""``tenants:``: capacity shares per tenant and how many tenants are counted.

A tenant is the ``namespace.tenant`` of a backend (or the ``tenant`` a caller passes with a call, see
``hicache_mooncake.keys.request_tenant``); its pages carry its name in their keys.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_tenant_name(name: str) -> str:
    """``name`` if it is a usable tenant name ("" is the default tenant), else ValueError."""
    if name and not TENANT_NAME.match(name):
        raise ValueError(
            f"tenant {name!r}: 1-64 characters, letters, digits, '.', '_', '-', starting with a letter or digit"
        )
    return name


class TenantShareConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    dram: float = Field(default=1.0, gt=0, le=1)
    """Share of the DRAM tier the tenant may hold (1: no limit); over it, its own least recently used
    DRAM pages move to SSD first."""
    ssd: float = Field(default=1.0, gt=0, le=1)
    """Share of the SSD tier the tenant may hold (1: no limit); over it, its own oldest SSD pages are
    dropped first."""


class TenantsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    shares: dict[str, TenantShareConfig] = Field(default_factory=dict)
    """Capacity shares by tenant name (``""``: the default tenant), e.g. ``{team-a: {dram: 0.5, ssd:
    0.3}}``; enforced by the placement for every policy: a tenant over its share evicts its own pages
    first. Tenants not listed have no limit."""
    max_tenants: int = Field(default=256, ge=1)
    """Distinct tenants counted in the stats (further ones are counted together as ``(other)``)."""

    @field_validator("shares")
    @classmethod
    def _names(cls, shares: dict[str, TenantShareConfig]) -> dict[str, TenantShareConfig]:
        for name in shares:
            check_tenant_name(name)
        return shares
