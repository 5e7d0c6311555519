"""Starting a backend's or a host cache service's publisher from its ``events:`` section."""

from __future__ import annotations

import logging

from hicache_mooncake.config.events import EventsConfig
from hicache_mooncake.keys import RankInfo
from hicache_mooncake.tiers.tiered_store import TieredStore

from .publisher import KvEventPublisher

log = logging.getLogger(__name__)
_ANNOUNCE_CHUNK = 1024


def offset_endpoint(endpoint: str, dp_rank: int) -> str:
    """SGLang's per-DP-rank offset (``ZmqEventPublisher.offset_endpoint_port``): ``tcp://h:p`` ->
    ``tcp://h:p+dp_rank``; ``ipc://`` / ``inproc://`` get the suffix ``_dp{rank}``."""
    if not endpoint or dp_rank == 0:
        return endpoint
    if endpoint.startswith("tcp://"):
        head, _, port = endpoint.rpartition(":")
        return f"{head}:{int(port) + dp_rank}" if port.isdigit() and int(port) else endpoint
    return f"{endpoint}_dp{dp_rank}"


def start_publisher(
    cfg: EventsConfig, store: TieredStore, dp_rank: int = 0, block_size: int = 0
) -> KvEventPublisher | None:
    """A publisher fed by every tier of ``store`` (None when ``events.endpoint`` is empty).
    ``ValueError`` naming the key when an endpoint cannot be bound."""
    if not cfg.enabled:
        return None
    publisher = KvEventPublisher(
        offset_endpoint(cfg.endpoint, dp_rank),
        topic=cfg.topic,
        replay_endpoint=offset_endpoint(cfg.replay_endpoint, dp_rank),
        max_queue=cfg.max_queue,
        batch_max=cfg.batch_max,
        flush_interval_s=cfg.flush_interval_s,
        dp_rank=dp_rank,
        block_size=block_size,
        dram_medium=cfg.dram_medium,
    )
    store.set_events(publisher)
    announce_contents(publisher, store)
    log.info(
        "hicache-mooncake KV events: %s (topic %r%s)",
        publisher.endpoint,
        cfg.topic,
        f", replay {publisher.replay_endpoint}" if publisher.replay_endpoint else "",
    )
    return publisher


def announce_contents(publisher: KvEventPublisher, store: TieredStore) -> None:
    """Publish what the local tiers already hold (the SSD recovered from disk, a warm restore into
    DRAM) as ``BlockStored``, so a router learns about a restarted host's cache; at most
    ``events.max_queue`` keys (the rest counted ``dropped_keys``). Called right after
    ``set_events``, before the store serves anyone: an event of a change made meanwhile follows
    the announcement of its tier or repeats it (events are idempotent)."""
    dram, ssd = store.dram, store.ssd
    held = []
    if dram is not None:
        held.append((dram.name, dram.keys()))
    if ssd is not None:
        held.append((ssd.name, list(ssd.engine.keys())))
    for tier, keys in held:
        for start in range(0, len(keys), _ANNOUNCE_CHUNK):  # what fits the queue is announced
            publisher.stored(tier, keys[start : start + _ANNOUNCE_CHUNK])


def start_backend_publisher(
    cfg: EventsConfig, store: TieredStore, ranks: RankInfo, dp_rank: int, host_cache: bool
) -> KvEventPublisher | None:
    """A backend rank's publisher: only the first TP/PP/CP/DCP rank of each DP rank publishes (as
    SGLang's own publisher), and none when the tiers live in the host cache service (it publishes
    what it holds, from its own ``events:``)."""
    if not cfg.enabled:
        return None
    if host_cache:
        log.info("events.endpoint: the host cache service publishes the KV events; this rank does not")
        return None
    if (ranks.tp_rank, ranks.pp_rank, ranks.cp_rank, ranks.dcp_rank) != (0, 0, 0, 0):
        return None
    return start_publisher(cfg, store, dp_rank)


def start_service_publisher(cfg: EventsConfig, served: object) -> KvEventPublisher | None:
    """The host cache service's publisher, fed by the tiers of the store it serves (``served``: an
    ``ArenaStore``). It publishes every rank's pages once (``block_ids``: the first shard). An
    endpoint that cannot be bound is logged with the key and the service runs without events: the
    ranks it serves must not lose their cache over a monitoring socket."""
    store = getattr(served, "store", None)
    if not cfg.enabled or not isinstance(store, TieredStore):
        return None
    try:
        return start_publisher(cfg, store)
    except ValueError as exc:
        log.error("%s: the host cache service publishes no KV events", exc)
        return None
