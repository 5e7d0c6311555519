"""Shared-secret mutual authentication (HMAC-SHA256 challenge/response), pure functions.

1. server -> client: ``server_nonce`` (32 random bytes);
2. client -> server: ``hmac(secret, "client" | server_nonce)`` and a ``client_nonce``;
3. server -> client: ``hmac(secret, "server" | client_nonce)`` (the client checks it too).

A node without a secret uses the empty key: the handshake still runs (it proves both ends speak
this protocol) but authenticates nothing; configure a secret on any non-loopback bind.
"""

from __future__ import annotations

import hashlib
import hmac
import os

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
