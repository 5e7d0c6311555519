"""Shared-secret mutual authentication (HMAC-SHA256 challenge/response), pure functions.

1. server -> client: ``server_nonce`` (32 random bytes);
2. client -> server: ``hmac(secret, "client" | server_nonce)`` and a ``client_nonce``;
3. server -> client: ``hmac(secret, "server" | client_nonce)`` (the client checks it too).

A node without a secret uses the empty key: the handshake still runs (it proves both ends speak
this protocol) but authenticates nothing. That is allowed on loopback only: a node bound beyond it,
or a client reaching a node beyond it, refuses to run without a secret unless the operator set
``allow_unauthenticated`` (see ``is_loopback_host``).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import os
import socket

NONCE_LEN = 32
PROOF_LEN = 32


def new_nonce() -> bytes:
    return os.urandom(NONCE_LEN)


def client_proof(secret: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(secret, b"client" + server_nonce, hashlib.sha256).digest()


def server_proof(secret: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(secret, b"server" + client_nonce, hashlib.sha256).digest()


def verify(expected: bytes, got: bytes | bytearray | memoryview) -> bool:
    return hmac.compare_digest(expected, bytes(got))


def _loopback_address(addr: str) -> bool:
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


@functools.lru_cache(maxsize=256)
def is_loopback_host(host: str) -> bool:
    """True when every address ``host`` names is a loopback address. The wildcard binds
    (``""``, ``0.0.0.0``, ``::``) and names that do not resolve count as beyond loopback."""
    if host in ("", "0.0.0.0", "::"):
        return False
    try:
        return _loopback_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addrs = {str(info[4][0]) for info in infos}
    try:
        return bool(addrs) and all(_loopback_address(a) for a in addrs)
    except ValueError:
        return False
