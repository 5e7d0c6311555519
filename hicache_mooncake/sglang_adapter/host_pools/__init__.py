"""SGLang's host pools as our backend sees them: which bytes one page of a pool is, what it holds
and how its keys are scoped.

A provider per pool class, behind a registry; ``HostPoolSet``: the pools registered on one attach."""

from hicache_mooncake.sglang_adapter.host_pools.pool_set import HostPoolSet
from hicache_mooncake.sglang_adapter.host_pools.registered import RegisteredPool

__all__ = ["HostPoolSet", "RegisteredPool"]
