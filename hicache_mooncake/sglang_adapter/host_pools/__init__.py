"""SGLang's host pools as our backend sees them: which bytes one page of a pool is (a provider
per pool class, behind a registry), what it holds (its object type), how its keys are scoped, and
the set of pools registered on one attach."""

from hicache_mooncake.sglang_adapter.host_pools.pool_set import HostPoolSet
from hicache_mooncake.sglang_adapter.host_pools.registered import RegisteredPool

__all__ = ["HostPoolSet", "RegisteredPool"]
