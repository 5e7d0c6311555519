"""Is a Mooncake master there? Asked in Python before calls that would freeze the process.

``MooncakeDistributedStore.setup`` and ``close`` hold the GIL while they wait for the master
(measured with the pinned wheel: ``setup`` 90 s without a master at ``host:port``, 2 s with an
etcd that has no leader; ``close`` 12 s after the master died), so every Python thread of SGLang
would stop with them. The provider calls them only when this module finds the master accepting
connections (and the transfer metadata service, when there is one): ``host:port`` directly; ``etcd://e1;e2`` by reading the elected leader's address
(``mooncake-store/mooncake_cluster/master_view``, the key Mooncake's masters publish under a lease)
through etcd's JSON gateway, then connecting to it. Every step is bounded by ``timeout_s``.
"""

from __future__ import annotations

import base64
import json
import socket
import urllib.request

MASTER_VIEW_KEY = "mooncake-store/mooncake_cluster/master_view"


def reachable_master(master: str, timeout_s: float) -> str | None:
    """The ``host:port`` of a master that accepts a TCP connection now, or None."""
    scheme, sep, rest = master.partition("://")
    if not sep:
        return master if _connects(master, timeout_s) else None
    if scheme != "etcd":
        return None
    for endpoint in (e.strip() for e in rest.split(";")):
        leader = _etcd_get(endpoint, MASTER_VIEW_KEY, timeout_s) if endpoint else None
        if leader and _connects(leader, timeout_s):
            return leader
    return None


def metadata_reachable(metadata_server: str, timeout_s: float) -> bool:
    """``P2PHANDSHAKE`` needs no service; ``etcd://h:p[;h:p]`` / ``http://h:p/...``: one accepts TCP."""
    scheme, sep, rest = metadata_server.partition("://")
    if not sep:
        return True
    hosts = rest.split("/", 1)[0].split(";") if scheme == "etcd" else [rest.split("/", 1)[0]]
    return any(
        _connects(h if ":" in h else f"{h}:{443 if scheme == 'https' else 80}", timeout_s) for h in hosts
    )


def _connects(address: str, timeout_s: float) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _etcd_get(endpoint: str, key: str, timeout_s: float) -> str | None:
    url = endpoint if endpoint.startswith(("http://", "https://")) else f"http://{endpoint}"
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    request = urllib.request.Request(f"{url}/v3/kv/range", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            kvs = json.loads(response.read()).get("kvs") or []
    except (OSError, ValueError):
        return None
    if not kvs:
        return None
    return base64.b64decode(kvs[0].get("value", "")).decode(errors="replace") or None
