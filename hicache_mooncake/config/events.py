"""``events:``: KV events for routers (issue 47): what the tiers store and drop, published in
SGLang's own KV event format over ZMQ (``hicache_mooncake.kv_events``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class EventsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    endpoint: str = ""
    """ZMQ address the PUB socket binds (``tcp://127.0.0.1:5600``, ``tcp://*:5600``,
    ``ipc:///run/x.sock``); "": no events. A router's SUB socket connects to it. In SGLang, the
    backend of data-parallel rank ``d`` binds port ``+ d`` (as SGLang's own ``--kv-events-config``
    publisher) and only the first TP/PP/CP rank publishes; with ``tiers.host_cache`` the host cache
    service publishes (its own ``events:``), the ranks do not."""
    topic: str = ""
    """First frame of every message (SUB sockets filter on it); "" for none."""
    replay_endpoint: str = ""
    """ZMQ ROUTER address for replay (SGLang's protocol: a request of the starting sequence number
    as 8 big-endian bytes gets the buffered batches from there, then an end marker); "": none."""
    max_queue: int = Field(default=100_000, ge=1)
    """Most keys waiting to be published; a store call whose keys do not fit drops them (counted
    ``dropped_keys``) instead of waiting: the data path never waits for the publisher. Removals
    and clears may fill twice as many (a lost store makes a router under-count, a lost removal
    would make it over-count)."""
    batch_max: int = Field(default=1024, ge=1)
    """Most block hashes per published ``KVEventBatch``; a queue this long is published at once."""
    flush_interval_s: float = Field(default=0.05, gt=0, le=60)
    """Longest time an event waits in the queue before it is published."""
    dram_medium: Literal["CPU_PINNED", "EXTERNAL"] = "CPU_PINNED"
    """``medium`` of our host DRAM tier's events (the SSD tier is ``DISK``, a remote pool
    ``EXTERNAL``). ``CPU_PINNED``: host memory of this host, one copy away from SGLang's host pool,
    which a router weights as host memory. SGLang's own events use ``CPU_PINNED`` for its host pool
    (L2): a consumer that merges SGLang's stream and ours under one worker and tracks blocks per
    medium should set ``EXTERNAL`` (without a remote pool), so that neither stream's removals undo
    the other's stores."""

    @field_validator("endpoint", "replay_endpoint")
    @classmethod
    def _zmq_address(cls, value: str) -> str:
        if value and not value.startswith(("tcp://", "ipc://", "inproc://")):
            raise ValueError(f"must be a ZMQ address (tcp://host:port, ipc://path), got {value!r}")
        return value

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint)
