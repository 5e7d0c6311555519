"""SGLang's KV event schema (``sglang.srt.disaggregation.kv_events``, 0.5.23), encoded byte for
byte as SGLang encodes it, without importing SGLang (the host cache service runs without it).

A batch is the positional msgpack array ``[ts, events, attn_dp_rank]``; each event is a msgpack
map tagged ``type`` = the class name, optional fields left at ``None`` omitted. SGLang's decoder
``msgspec.msgpack.Decoder(KVEventBatch)`` reads what we encode (tested), and so does every
consumer of SGLang's events (Dynamo decodes SGLang's and vLLM's with one code path).
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec


class StorageMedium(enum.StrEnum):
    """SGLang's storage tiers (``medium`` of an event)."""

    GPU = "GPU"
    CPU = "CPU_PINNED"
    DISK = "DISK"
    EXTERNAL = "EXTERNAL"


class EventBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[Any]
    attn_dp_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Tagged msgpack map: ``type`` carries the class name (SGLang's classes have the same names)."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None = None
    cache_salt: str | None = None
    session_id: str | None = None
    lora_name: str | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
