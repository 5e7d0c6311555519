"""The eviction-policy contract shared by every tier and by the trace replayer.

A policy tracks keys, never bytes. The tier that owns the bytes tells the policy what happened
(``on_insert``, ``on_hit``, ``on_remove``) and asks it which key to give up (``pop_victim``). A policy
may also refuse an insertion (``should_admit``), which the tier turns into "not stored here".

Invariants every policy keeps:
- ``pop_victim`` returns a key that was inserted and not yet removed or popped, and forgets it;
  it returns ``None`` only when the policy tracks no key.
- ``on_remove`` of an unknown key is a no-op (tiers remove keys the policy may already have popped).
- ``len(policy)`` is the number of tracked (resident) keys; ghost entries do not count.
- No method does I/O or blocks; callers hold their own lock around a policy (policies are not
  thread-safe on their own).

What a policy may look at is only what the backend sees at run time (``AccessContext``): the key,
its place in the current call (SGLang passes a request's pages in prefix order), the time, the
object size and type. Never the future.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, NamedTuple

if TYPE_CHECKING:
    from .hints import Hints


class ObjectType(enum.IntEnum):
    """What an object holds (DESIGN.md §3); policies may weigh types differently.

    The hybrid-model types are what SGLang's sidecar host pools (``PoolName``) hold for one page:
    they matter to a policy because of WHERE in a cached prefix they are useful. A KV page, an
    indexer page and a compressed-KV page are needed for every page of a prefix (SGLang's
    ``ALL_PAGES``); a Mamba state, a compressor state and the pages of a sliding window only at
    the END of the prefix they are loaded for (``TRAILING_PAGES``), so one in the middle of a
    chain that is cached further is worth little. Values are stable (they travel as one byte in
    the remote tier's object header); new types get new numbers.
    """

    KV_PAGE = 0
    INDEX = 1
    CONFIG = 2
    SIDECAR = 3
    """A hybrid-model pool with no finer type below."""
    MAMBA_STATE = 4
    """Linear-attention / SSM state (conv + temporal) at one page boundary (``PoolName.MAMBA``)."""
    SWA_WINDOW = 5
    """Sliding-window attention KV pages (``swa``, ``auxiliary_swa``, ``draft_swa``)."""
    INDEXER = 6
    """Sparse-attention indexer keys riding on the KV pages (``indexer``, V4 ``*_indexer*``)."""
    COMPRESSED_KV = 7
    """DeepSeek V4 compressed KV pages (``deepseek_v4_c1..c128`` and their ``_rope`` halves)."""
    COMPRESS_STATE = 8
    """DeepSeek V4 compressor state at one window boundary (``deepseek_v4_*_state``)."""
    DRAFT_KV = 9
    """A speculative-decoding draft model's KV pages (``draft``)."""


#: Types useful only at the END of the prefix they are loaded for (SGLang's ``TRAILING_PAGES``):
#: one stored for a page of a chain that is cached further is superseded (``superseded.py``).
TRAILING_TYPES = frozenset({ObjectType.MAMBA_STATE, ObjectType.SWA_WINDOW, ObjectType.COMPRESS_STATE})


class AccessContext(NamedTuple):
    """What the backend knew about one key when it touched it (immutable; a named tuple because
    one is made per key of every call: it costs half of a frozen dataclass to build).

    ``position`` is the key's index in the current call's key list (prefix order) and
    ``batch_len`` that list's length; ``prefix_hits`` is how many leading keys of the call were
    already cached when the call arrived (for a set: the keys found; for a get: the hit run).
    ``prev_key`` is the key just before this one in the chain (``None`` for a chain head).
    For a ``batch_set`` whose call carries the request's already-stored prefix (SGLang's
    ``prefix_keys``), ``prefix_hits`` is that prefix's length, so ``prefix_hits + position`` is the
    key's depth in the request and ``prev_key`` of the first key is the last prefix key.
    ``demoted`` is True when a lower tier receives the key from an upper tier's eviction (the other
    fields then repeat what the upper tier was told when the key was set). ``promoted`` is True
    when an upper tier receives the key because it was read from a lower tier (the other fields are
    those of the read).
    ``request_len`` is the number of keys of the request the call belongs to, when the backend
    knows it (the keys of the ``batch_exists`` that preceded a ``batch_get`` of the hit run); 0
    means unknown (then ``prefix_hits + batch_len`` is the best guess for a set).
    """

    now: float = 0.0
    position: int = 0
    batch_len: int = 1
    prefix_hits: int = 0
    size: int = 0
    prev_key: str | None = None
    obj_type: ObjectType = ObjectType.KV_PAGE
    demoted: bool = False
    promoted: bool = False
    request_len: int = 0


DEFAULT_CONTEXT = AccessContext()


class EvictionPolicy(ABC):
    """Base class of all policies; subclasses register themselves by ``name``."""

    name: ClassVar[str] = ""

    @abstractmethod
    def on_insert(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        """``key`` became resident. Inserting a tracked key counts as a hit."""

    @abstractmethod
    def on_hit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:
        """A resident ``key`` was read (or found by exists). Unknown keys are ignored."""

    @abstractmethod
    def on_remove(self, key: str) -> None:
        """``key`` left the tier for a reason other than ``pop_victim``; unknown keys are ignored."""

    @abstractmethod
    def pop_victim(self) -> str | None:
        """Choose the key to evict, stop tracking it and return it (``None`` when empty)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, key: object) -> bool: ...

    @property
    def evicts_oldest_first(self) -> bool:
        """``pop_victim`` returns the least recently set or hit key, whatever else happened
        (LRU): a placement may then insert a whole batch before it makes room."""
        return False

    def should_admit(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        """Whether ``key`` may be inserted at all; the default admits everything."""
        return True

    def on_set(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> bool:
        """A write of ``key``: the ONE call a placement makes per key of a set. A tracked key is
        refreshed (as ``on_insert`` of a tracked key); a new key is inserted when
        ``should_admit`` allows. Returns whether ``key`` is tracked afterwards. Policies may
        override it to answer in one step."""
        if key not in self and not self.should_admit(key, ctx):
            return False
        self.on_insert(key, ctx)
        return True

    def on_set_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> list[bool]:
        """``on_set`` of each key in order (the same calls, the same answers); policies may
        override it with a cheaper pass that ends in the same state."""
        return list(map(self.on_set, keys, ctxs))

    def on_hit_batch(self, keys: Sequence[str], ctxs: Sequence[AccessContext]) -> None:
        """``on_hit`` of each key in order; policies may override it with a cheaper pass that
        ends in the same state."""
        deque(map(self.on_hit, keys, ctxs), maxlen=0)

    def on_miss(self, key: str, ctx: AccessContext = DEFAULT_CONTEXT) -> None:  # noqa: B027
        """A lookup of ``key`` missed; policies that learn from misses (ghosts) override this."""

    def use_hints(self, hints: Hints | None) -> None:  # noqa: B027
        """The store's ``Hints`` (read at every access by policies that use them); the default
        ignores hints."""

    def clear(self) -> None:
        """Forget every key (resident and ghost)."""
        while self.pop_victim() is not None:
            pass
