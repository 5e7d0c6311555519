"""The contract between ``RemoteDramTier`` and a pool provider.

An *item* is ``(key, parts)``: one object whose bytes are the parts back to back (K and V of a
page, or every layer's runs). Keys arrive fully namespaced (model, layout digest, tenant, rank):
a provider stores them as given, so deployments sharing one pool never read each other's bytes.

Failure semantics:
- per-item failures are ``False`` (a miss, a refused write), never exceptions;
- a provider whose pool is unreachable as a whole (no master, not connected) raises
  ``PoolUnavailable``; the tier answers misses and, for ``blocking`` providers, stops calling
  until ``probe()`` succeeds again;
- ``blocking = True`` declares that calls may block past any deadline (native code that cannot
  be interrupted): the tier then runs them on its worker threads under ``tiers.remote.timeout_s``
  (see ``tiers.call_guard``). Providers with their own socket deadlines (``nodes``) say False.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol

from ..parts import Parts
from .mooncake_config import MooncakeConfig

Item = tuple[str, Parts]


class PoolUnavailable(Exception):
    """The pool cannot be reached at all (master down, client not connected yet)."""


class RemoteSettings(Protocol):
    """The ``tiers.remote`` section as providers read it (the schema lives in the config package)."""

    @property
    def provider(self) -> str: ...

    @property
    def engine(self) -> str: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def connect_timeout_s(self) -> float: ...

    @property
    def connections_per_peer(self) -> int: ...

    @property
    def allow_unauthenticated(self) -> bool: ...

    @property
    def shm_dir(self) -> str: ...

    @property
    def rdma(self) -> Any: ...

    @property
    def mooncake(self) -> MooncakeConfig: ...

    def secret(self) -> bytes: ...


class PoolProvider(ABC):
    name: str = ""
    blocking: bool = False
    retry_interval_s: float = 1.0
    """While the pool is unreachable, how often the tier calls ``probe()`` (blocking providers)."""

    def register_memory(self, regions: Sequence[memoryview]) -> None:  # noqa: B027
        """Caller buffers that items will point into (SGLang's host pool), announced once."""

    def deadline_s(self, op: str, default: float) -> float:
        """Deadline of one ``op`` call (``exists`` | ``put`` | ``get`` | ``remove`` | ``close``)."""
        return default

    def probe(self) -> bool:
        """After ``PoolUnavailable`` or a timeout: is the pool reachable again? (may reconnect)."""
        return True

    @abstractmethod
    def exists_batch(self, keys: Sequence[str]) -> list[bool]: ...

    @abstractmethod
    def put_batch(self, items: Sequence[Item], obj_type: int) -> list[bool]:
        """Store each item as one object; an existing key is left as it is and counts as stored."""

    @abstractmethod
    def get_batch_into(self, items: Sequence[Item]) -> list[bool]:
        """True only when the object's bytes filled the parts exactly (size mismatch: False)."""

    @abstractmethod
    def remove_batch(self, keys: Sequence[str]) -> list[bool]: ...

    @abstractmethod
    def clear(self) -> None: ...

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """Pool figures (``entries``/``used_bytes``/``capacity_bytes`` where the pool reports them)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections and registrations; idempotent; never raises."""
