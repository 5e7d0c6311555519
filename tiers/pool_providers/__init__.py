"""Pool providers: what stores the objects of the remote tier (``tiers.remote.provider``).

``RemoteDramTier`` is the tier above every provider (write-through, promotion of pool hits,
deadlines, misses-not-exceptions, counters); a provider only moves a batch of objects to and from
its pool. Built-in: ``nodes`` (our memory nodes, ``transport.ClusterClient``) and ``mooncake``
(Mooncake Store through ``mooncake.store``). A new provider is a new module here, registered by
name in ``registry._BUILTIN`` (imported lazily: the ``mooncake`` wheel is only needed when used).
"""

from .base import PoolProvider, PoolUnavailable, RemoteSettings
from .registry import make_provider, provider_names, register_provider

__all__ = [
    "PoolProvider",
    "PoolUnavailable",
    "RemoteSettings",
    "make_provider",
    "provider_names",
    "register_provider",
]
