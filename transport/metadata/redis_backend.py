"""Metadata in a real Redis (redis-py, imported lazily). Every call is bounded by
``timeout_s``; any Redis error becomes ``MetadataUnavailable`` so callers can detach and rejoin.

Keys (``ns`` = namespace): ``ns:members`` (set of node ids), ``ns:node:<id>`` (NodeInfo JSON,
expires after the heartbeat TTL), ``ns:leader:<role>`` (``owner|token``, SET NX PX lease),
``ns:fence:<role>`` (fencing counter, INCR on every new leadership).
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..errors import MetadataUnavailable
from .base import NodeInfo

_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. t, 'PX', ARGV[2])
  return t
end
return false
"""
_RENEW = """
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. '|' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. '|' then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisMetadata:
    def __init__(
        self, url: str = "redis://127.0.0.1:6379/0", namespace: str = "hicache", timeout_s: float = 0.5
    ) -> None:
        import redis  # optional dependency (extra "cluster")

        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self.ns = namespace
        scheme, _, rest = url.partition("://")
        self._url = f"{scheme}://{rest.split('@')[-1]}"  # never log a password
        self._r: Any = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry_on_timeout=False,
            health_check_interval=0,
        )
        self._acquire = self._r.register_script(_ACQUIRE)
        self._renew = self._r.register_script(_RENEW)
        self._release = self._r.register_script(_RELEASE)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._errors as exc:
            raise MetadataUnavailable(f"{self._url} (metadata.url): {exc}") from exc

    def register_node(self, info: NodeInfo, ttl_s: float) -> None:
        def go() -> None:
            pipe = self._r.pipeline(transaction=False)
            pipe.sadd(f"{self.ns}:members", info.node_id)
            pipe.set(f"{self.ns}:node:{info.node_id}", info.to_json(), px=max(1, int(ttl_s * 1000)))
            pipe.execute()

        self._call(go)

    def deregister_node(self, node_id: str) -> None:
        def go() -> None:
            pipe = self._r.pipeline(transaction=False)
            pipe.srem(f"{self.ns}:members", node_id)
            pipe.delete(f"{self.ns}:node:{node_id}")
            pipe.execute()

        self._call(go)

    def live_nodes(self) -> list[NodeInfo]:
        def go() -> list[NodeInfo]:
            ids = sorted(x.decode() for x in self._r.smembers(f"{self.ns}:members"))
            if not ids:
                return []
            raw = self._r.mget([f"{self.ns}:node:{i}" for i in ids])
            dead = [i for i, v in zip(ids, raw, strict=True) if v is None]
            if dead:
                self._r.srem(f"{self.ns}:members", *dead)
            return [NodeInfo.from_json(v) for v in raw if v is not None]

        result: list[NodeInfo] = self._call(go)
        return result

    def acquire_leadership(self, role: str, owner: str, lease_ms: int) -> int | None:
        token = self._call(
            self._acquire, [f"{self.ns}:leader:{role}", f"{self.ns}:fence:{role}"], [owner, lease_ms]
        )
        return int(token) if token else None

    def renew_leadership(self, role: str, owner: str, lease_ms: int) -> bool:
        return bool(self._call(self._renew, [f"{self.ns}:leader:{role}"], [owner, lease_ms]))

    def release_leadership(self, role: str, owner: str) -> None:
        self._call(self._release, [f"{self.ns}:leader:{role}"], [owner])

    def leader(self, role: str) -> tuple[str, int] | None:
        raw = self._call(self._r.get, f"{self.ns}:leader:{role}")
        if not raw:
            return None
        owner, _, token = raw.decode().rpartition("|")
        return owner, int(token)

    def ping(self) -> bool:
        try:
            return bool(self._r.ping())
        except self._errors:
            return False

    def close(self) -> None:
        with contextlib.suppress(*self._errors):
            self._r.close()
