"""Client of the admin endpoint (``AdminClient``), and how the CLI finds every rank of a host
(``rank_endpoints``: the discovery files the ranks write, or URLs given by hand)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache_mooncake.metrics.discovery import endpoints


class AdminError(Exception):
    """The endpoint refused or could not be reached; ``status`` 0 means unreachable."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RankEndpoint:
    url: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        rank = self.labels.get("rank")
        if rank is None and self.labels.get("role") == "host-cache":
            return f"host cache {self.labels.get('host_cache', '')}"
        return f"rank {rank}" if rank is not None else self.url


def rank_endpoints(directory: Path) -> list[RankEndpoint]:
    """The live admin endpoints of this host, by rank."""
    found = [RankEndpoint(e.url, e.labels) for e in endpoints(directory) if e.role == "admin"]
    return sorted(
        found, key=lambda e: (e.labels.get("model", ""), int(e.labels.get("rank", "0") or 0), e.url)
    )


class AdminClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return dict(json.loads(resp.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            raise AdminError(exc.code, str(message)) from None
        except (urllib.error.URLError, OSError) as exc:
            raise AdminError(0, f"cannot reach {self.url}: {getattr(exc, 'reason', exc)}") from None

    # ------------------------------------------------------------------ the routes
    def show(self) -> dict[str, Any]:
        return self.request("GET", "/v1/tiers")

    def operations(self) -> dict[str, Any]:
        return self.request("GET", "/v1/operations")

    def operation(self, op_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/operations/{op_id}")

    def resize(self, tier: str, capacity: int | str, timeout_s: float | None = None) -> dict[str, Any]:
        return self.request(
            "POST", "/v1/resize", _with_timeout({"tier": tier, "capacity": capacity}, timeout_s)
        )

    def detach(self, tier: str, mode: str = "drain", timeout_s: float | None = None) -> dict[str, Any]:
        return self.request("POST", "/v1/detach", _with_timeout({"tier": tier, "mode": mode}, timeout_s))

    def attach(self, tier: str, config: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        return self.request("POST", "/v1/attach", _with_timeout({"tier": tier, "config": config}, timeout_s))

    def freeze(self, frozen: bool = True) -> dict[str, Any]:
        return self.request("POST", "/v1/freeze", {"frozen": frozen})

    def clear(self, tenant: str, timeout_s: float | None = None) -> dict[str, Any]:
        return self.request("POST", "/v1/clear", _with_timeout({"tenant": tenant}, timeout_s))

    def hints(self) -> dict[str, Any]:
        return self.request("GET", "/v1/hints")

    def pin(self, page_hashes: list[str], ttl_s: float, tenant: str | None = None) -> dict[str, Any]:
        return self.request(
            "POST", "/v1/hints/pin", _hint({"page_hashes": page_hashes, "ttl_s": ttl_s}, tenant)
        )

    def unpin(self, page_hashes: list[str], tenant: str | None = None) -> dict[str, Any]:
        return self.request("POST", "/v1/hints/unpin", _hint({"page_hashes": page_hashes}, tenant))

    def mark_shared(self, page_hashes: list[str], ttl_s: float, tenant: str | None = None) -> dict[str, Any]:
        return self.request(
            "POST", "/v1/hints/shared", _hint({"page_hashes": page_hashes, "ttl_s": ttl_s}, tenant)
        )

    def session(
        self, session: str, action: str, page_hashes: list[str] | None = None, tenant: str | None = None
    ) -> dict[str, Any]:
        """``action``: "open" or "close" (``hint_routes``)."""
        body: dict[str, Any] = {"session": session, "action": action}
        if page_hashes:
            body["page_hashes"] = page_hashes
        return self.request("POST", "/v1/hints/session", _hint(body, tenant))

    def lookup(
        self, keys: list[str], tenant: str | None = None, remote: bool | None = None
    ) -> dict[str, Any]:
        """Where this rank holds each page (``lookup_routes``)."""
        body: dict[str, Any] = {"keys": keys}
        if remote is not None:
            body["remote"] = remote
        return self.request("POST", "/v1/lookup", _hint(body, tenant))

    def layout(self) -> dict[str, Any]:
        """What this rank stores and how its keys are made (``layout``)."""
        return self.request("GET", "/v1/layout")

    def wait(
        self,
        op: dict[str, Any],
        timeout_s: float,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        poll_s: float = 0.2,
    ) -> dict[str, Any]:
        """Poll operation ``op`` until it ends (or ``timeout_s``); returns its last view."""
        end = time.monotonic() + timeout_s
        while op.get("state") == "running" and time.monotonic() < end:
            time.sleep(poll_s)
            op = self.operation(str(op["id"]))
            if on_progress is not None:
                on_progress(op)
        return op


def _with_timeout(body: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
    return {**body, "timeout_s": timeout_s} if timeout_s is not None else body


def _hint(body: dict[str, Any], tenant: str | None) -> dict[str, Any]:
    return {**body, "tenant": tenant} if tenant is not None else body
