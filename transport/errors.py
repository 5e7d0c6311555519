"""Exceptions of the transport layer. Callers of ``NodeClient``/``ClusterClient`` never see them:
those turn every failure into a miss / ``False`` and count it."""

from __future__ import annotations


class TransportError(Exception):
    """Base class: anything that went wrong moving bytes or talking to a peer."""


class ProtocolError(TransportError):
    """A frame that breaks the wire format or its limits (bad magic, version, sizes)."""


class RequestRefused(ProtocolError):
    """The node answered a request with an error status: it is alive, the request was refused."""


class AuthError(TransportError):
    """The shared-secret handshake failed (wrong secret, or the peer is not a node)."""


class PeerUnavailable(TransportError):
    """The peer could not be reached, or it was marked down after a recent failure."""


class MetadataUnavailable(TransportError):
    """The metadata service (Redis) could not be reached within its timeout."""


class EngineUnavailable(TransportError):
    """This host cannot run the requested transfer engine (e.g. rdma: no device, no pyverbs)."""


class RdmaSetupError(TransportError):
    """Opening, registering or connecting RDMA resources failed (device limits, GID, refusal)."""


class RdmaNotServed(PeerUnavailable):
    """The node answered RDMA_CONNECT with "unknown op": it serves no RDMA (no ``rdma_device``)."""
