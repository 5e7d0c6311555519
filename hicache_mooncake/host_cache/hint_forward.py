"""A host cache client's hints go to the service's policy (``ForwardingHints``).

With ``tiers.host_cache`` the rank's store has no tier of its own to place: the policy that places
its pages runs in the service. So the rank's ``TieredStore.hints`` is a ``ForwardingHints``: every
hint written there (by the rank's admin hint routes, already mapped from SGLang page hashes to
store keys, and by the backend when SGLang passes a session id) is also sent, in order, to the
service's admin endpoint (``POST /v1/hints/keys``, the bearer token of ``admin/auth.py``), found in
the admin discovery directory by its labels (``admin_endpoint.service_labels``).

One sender thread (started at the first hint) posts what is queued, oldest first, in batches.
``attach`` (SGLang's data path) never waits: its entry is queued, or dropped and counted when
``MAX_QUEUED`` entries wait already. Every other hint (an operator's or an application's request)
waits until the service applied it, at most ``timeout_s``, and raises ``OperationError`` (a 400
naming the cache) when it could not be delivered, so the admin request says so instead of a 200
that changed nothing. The local ``Hints`` state is kept as well (bounded as usual); ``stats`` shows
the service's figures from its last answer, and the forwarding counts.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hicache_mooncake.admin import auth
from hicache_mooncake.admin.client import AdminClient, AdminError
from hicache_mooncake.admin.server import discovery_dir
from hicache_mooncake.config import BackendConfig
from hicache_mooncake.metrics.discovery import endpoints
from hicache_mooncake.tiers.policy.hints import Hints
from hicache_mooncake.tiers.runtime_ops import OperationError

from .hint_keys_routes import ROLE
from .paths import HostCachePaths

log = logging.getLogger(__name__)

MAX_QUEUED = 4096
"""Entries waiting to be sent; an ``attach`` beyond it is dropped (counted)."""
KEYS_PER_ENTRY = 8192
KEYS_PER_REQUEST = 32768  # with store keys of ~150 characters: well under the endpoint's body limit


@dataclass
class _Entry:
    body: dict[str, Any]
    done: threading.Event | None = None  # set when sent (or failed): a caller waits on it
    error: str = ""
    keys: int = field(init=False)

    def __post_init__(self) -> None:
        self.keys = len(self.body.get("keys", ()))


class ServiceAdmin:
    """Where the service's admin endpoint is (its discovery file) and its token."""

    def __init__(self, config: BackendConfig, timeout_s: float) -> None:
        self.admin = config.admin
        paths = HostCachePaths.of(config.host_cache)
        self.name = paths.name
        self.socket = str(paths.socket)
        self.timeout_s = timeout_s
        self._client: AdminClient | None = None

    def find(self) -> AdminClient:
        """A client of the running service's endpoint. OperationError when none is registered."""
        directory = discovery_dir(self.admin)
        found = [
            e
            for e in endpoints(directory)
            if e.role == "admin" and e.labels.get("role") == ROLE and e.labels.get("socket") == self.socket
        ]
        if not found:
            raise OperationError(
                f"host cache {self.name!r}: no admin endpoint of the service in {directory} "
                "(is it running, with admin.port set?)"
            )
        token = auth.load_token(self.admin)
        if token is None:
            try:
                token = auth.read_token_file(auth.token_path(directory))
            except FileNotFoundError:
                raise OperationError(f"host cache {self.name!r}: no admin token in {directory}") from None
        return AdminClient(found[-1].url, token, self.timeout_s)

    def post(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        """Send ``entries``; a stale endpoint (the service restarted) is looked up again once."""
        for attempt in (0, 1):
            if self._client is None:
                self._client = self.find()
            try:
                return self._client.request("POST", "/v1/hints/keys", {"hints": entries})
            except AdminError as exc:
                self._client = None
                if exc.status != 0 or attempt:
                    raise OperationError(f"host cache {self.name!r}: hints not applied: {exc}") from None
        raise AssertionError("unreachable")


class ForwardingHints(Hints):
    """``Hints`` that also reach the service's policy (module docstring)."""

    def __init__(self, config: BackendConfig, timeout_s: float | None = None) -> None:
        super().__init__()
        self.timeout_s = timeout_s if timeout_s is not None else config.io.timeout_s
        self.service = ServiceAdmin(config, self.timeout_s)
        self._queue: collections.deque[_Entry] = collections.deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._service_stats: dict[str, Any] = {}
        self._warned = -1e9
        self.counts = {"forwarded": 0, "forward_failed": 0, "forward_dropped": 0}

    # ------------------------------------------------------------------ the hints
    def open_session(self, sid: str, keys: Iterable[str] = ()) -> None:
        keys = list(keys)
        super().open_session(sid, keys)
        self._send({"action": "open", "session": sid}, keys)

    def attach(self, sid: str, keys: Iterable[str]) -> None:
        keys = list(keys)
        super().attach(sid, keys)
        self._send({"action": "attach", "session": sid}, keys, wait=False)

    def close_session(self, sid: str, keys: Iterable[str] = ()) -> None:
        keys = list(keys)
        super().close_session(sid, keys)
        self._send({"action": "close", "session": sid}, keys)

    def mark_shared(self, keys: Iterable[str], ttl_s: float) -> None:
        keys = list(keys)
        super().mark_shared(keys, ttl_s)
        self._send({"action": "shared", "ttl_s": ttl_s}, keys)

    def pin(self, keys: Iterable[str], ttl_s: float) -> None:
        keys = list(keys)
        super().pin(keys, ttl_s)
        self._send({"action": "pin", "ttl_s": ttl_s}, keys)

    def unpin(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        super().unpin(keys)
        self._send({"action": "unpin"}, keys)

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), **self._service_stats, **self.counts}

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(self.timeout_s + 1)

    # ------------------------------------------------------------------ sending
    def _send(self, head: dict[str, Any], keys: list[str], wait: bool = True) -> None:
        chunks = [keys[i : i + KEYS_PER_ENTRY] for i in range(0, len(keys), KEYS_PER_ENTRY)] or [[]]
        entries = [_Entry({**head, "keys": c}, threading.Event() if wait else None) for c in chunks]
        with self._cond:
            if self._closed:
                if wait:
                    raise OperationError(f"host cache {self.service.name!r}: the backend is closing")
                return
            if not wait and len(self._queue) >= MAX_QUEUED:
                self.counts["forward_dropped"] += 1
                return
            self._queue.extend(entries)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hicache-hint-forward", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        if not wait:
            return
        deadline = time.monotonic() + self.timeout_s
        for entry in entries:
            assert entry.done is not None
            if not entry.done.wait(max(0.0, deadline - time.monotonic())):
                raise OperationError(
                    f"host cache {self.service.name!r}: hints not applied within {self.timeout_s:g} s"
                )
            if entry.error:
                raise OperationError(entry.error)

    def _take(self) -> list[_Entry] | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            batch = [self._queue.popleft()]
            keys = batch[0].keys
            while self._queue and keys + self._queue[0].keys <= KEYS_PER_REQUEST:
                keys += self._queue[0].keys
                batch.append(self._queue.popleft())
            return batch

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            error = ""
            try:
                answer = self.service.post([e.body for e in batch])
                stats = answer.get("hints")
                if isinstance(stats, dict):
                    self._service_stats = stats
                self.counts["forwarded"] += len(batch)
            except Exception as exc:  # a failure is a hint lost, never an exception in SGLang
                error = str(exc)
                self.counts["forward_failed"] += len(batch)
                now = time.monotonic()
                if now - self._warned >= 60.0:  # at most one warning a minute
                    self._warned = now
                    log.warning(
                        "%s (%d hint entries; %d lost so far)",
                        error,
                        len(batch),
                        self.counts["forward_failed"],
                    )
            for entry in batch:
                entry.error = error
                if entry.done is not None:
                    entry.done.set()
