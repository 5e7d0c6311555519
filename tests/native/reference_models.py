"""Pure-Python reference models of the native structures (tests only: never a run-time fallback).

The differential tests drive a native structure and its model with the same calls and compare
every answer and the full state after every step.
"""

from __future__ import annotations

from collections.abc import Sequence

import xxhash


def ref_fingerprint(key: str | bytes, mask: int = 0) -> int:
    """xxh3_64 (seed 0) of the UTF-8 bytes, ANDed with ``mask`` when non-zero, 0 -> 1."""
    data = key.encode() if isinstance(key, str) else key
    h = xxhash.xxh3_64_intdigest(data)
    if mask:
        h &= mask
    return h or 1


class RefFpTable:
    """A dict with FpTable's API: results as lists, values as tuples of value_words ints."""

    def __init__(self, value_words: int = 1) -> None:
        self.value_words = value_words
        self.entries: dict[int, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def put(self, fps: Sequence[int], values: Sequence[Sequence[int]]) -> list[bool]:
        out = []
        for fp, value in zip(fps, values, strict=True):
            assert fp != 0 and len(value) == self.value_words
            out.append(fp in self.entries)
            self.entries[fp] = tuple(value)
        return out

    def get(self, fps: Sequence[int]) -> tuple[list[bool], list[tuple[int, ...]]]:
        zero = (0,) * self.value_words
        return [fp in self.entries for fp in fps], [self.entries.get(fp, zero) for fp in fps]

    def contains(self, fps: Sequence[int]) -> list[bool]:
        return [fp in self.entries for fp in fps]

    def prefix_len(self, fps: Sequence[int]) -> int:
        n = 0
        for fp in fps:
            if fp not in self.entries:
                break
            n += 1
        return n

    def remove(self, fps: Sequence[int]) -> list[bool]:
        return [self.entries.pop(fp, None) is not None for fp in fps]

    def remove_if(self, fps: Sequence[int], expected_word0: Sequence[int]) -> list[bool]:
        out = []
        for fp, word0 in zip(fps, expected_word0, strict=True):
            hit = fp in self.entries and self.entries[fp][0] == word0
            if hit:
                del self.entries[fp]
            out.append(hit)
        return out

    def items(self) -> dict[int, tuple[int, ...]]:
        return dict(self.entries)

    def clear(self) -> None:
        self.entries.clear()


# ---- SSD entries (ssd/format.py's layout), what native.read_entries decides for one entry ----

ENTRY_BLOCK = 4096
ENTRY_MAGIC = 0x454B4348


def ref_entry_verdict(entry: bytes, key: bytes, payload_len: int, gen: int, seq: int, max_key: int) -> str:
    """The verdict name (``native.EntryVerdict``) on ``entry`` (the bytes read from its start:
    header block, payload, maybe cut short) expected to hold ``key`` with that payload length,
    generation and sequence number: the checks in the order the format defines them."""
    import struct

    if len(entry) < ENTRY_BLOCK + payload_len:
        return "SHORT"
    magic, ver, flags, kl, _pad, plen, eseq, egen, phash = struct.unpack_from("<IHHIIQQQQ", entry, 0)
    if magic != ENTRY_MAGIC:
        return "BAD_HEADER"
    if kl > max_key or 56 + kl > ENTRY_BLOCK:
        return "BAD_HEADER"
    (hh,) = struct.unpack_from("<Q", entry, 48)
    if xxhash.xxh3_64_intdigest(entry[:48] + entry[56 : 56 + kl]) != hh or ver != 1:
        return "BAD_HEADER"
    if flags & 1 or egen != gen or eseq != seq or plen != payload_len:
        return "STALE"
    if entry[56 : 56 + kl] != key:
        return "OTHER_KEY"
    if xxhash.xxh3_64_intdigest(entry[ENTRY_BLOCK : ENTRY_BLOCK + payload_len]) != phash:
        return "BAD_PAYLOAD"
    return "OK"


def ref_copy_slots(
    arena: bytearray, slot_offsets: list[int], pages: list[list[bytes]], into_arena: bool
) -> list[list[bytes]]:
    """What ``native.copy_slots`` does, one part at a time: page i's parts back to back in
    ``arena`` from ``slot_offsets[i]`` on (``into_arena``), or the arena's bytes there out into
    parts of the same lengths (returned; ``pages`` only gives their lengths)."""
    out: list[list[bytes]] = []
    for slot, parts in zip(slot_offsets, pages, strict=True):
        pos, got = slot, []
        for part in parts:
            if pos + len(part) > len(arena):
                raise ValueError("outside the arena")
            if into_arena:
                arena[pos : pos + len(part)] = part
            else:
                got.append(bytes(arena[pos : pos + len(part)]))
            pos += len(part)
        out.append(got)
    return out


class RefPageViewError(Exception):
    """What ``ref_page_views`` refuses: ``kind`` is ``"index"`` (a page's indices outside the pool)
    or ``"run"`` (a run outside every region), for page ``page``."""

    def __init__(self, kind: str, page: int) -> None:
        super().__init__(f"{kind} error at page {page}")
        self.kind = kind
        self.page = page


def ref_page_views(
    indices: Sequence[int],
    page_size: int,
    pages: int,
    limit: int,
    bases: Sequence[int],
    strides: Sequence[int],
    sizes: Sequence[int],
    regions: Sequence[tuple[int, int]],
) -> list[list[tuple[int, int]]]:
    """``native.page_views`` as ``(address, length)`` per run, page by page; the first bad page
    raises ``RefPageViewError``."""
    out = []
    for p in range(pages):
        first = indices[p * page_size]
        if first < 0 or first + page_size > limit:
            raise RefPageViewError("index", p)
        runs = []
        for base, stride, size in zip(bases, strides, sizes, strict=True):
            addr = base + first * stride
            if not any(start <= addr and addr + size <= start + length for start, length in regions):
                raise RefPageViewError("run", p)
            runs.append((addr, size))
        out.append(runs)
    return out


class RefSlotIndex:
    """``native.SlotIndex`` in dicts: rows by fingerprint, the key, pins and reads per slot, the
    zombies (slot -> size: removed while pinned) and the freed list."""

    def __init__(self, slots: int, shift: int) -> None:
        self.slots, self.shift = slots, shift
        self.rows: dict[int, tuple[int, int, int]] = {}
        self.keys: dict[int, str] = {}  # slot -> key
        self.pins: dict[int, int] = {}
        self.reads: dict[int, int] = {}
        self.zombies: dict[int, int] = {}  # slot -> size of the object removed while pinned
        self.freed: list[tuple[int, int]] = []  # (offset, size), in the order the last pins went

    def _slot(self, offset: int) -> int:
        if offset % (1 << self.shift) or offset >> self.shift >= self.slots:
            raise ValueError(f"offset {offset} is not a slot")
        return offset >> self.shift

    def _find(self, key: str, fp: int) -> tuple[int, tuple[int, int, int] | None]:
        row = self.rows.get(fp)
        if row is None:
            return -1, None
        return (1 if self.keys.get(row[0] >> self.shift) == key else 0), row

    def _drop(self, slot: int, size: int) -> None:
        """The row of ``slot`` is gone: its key too; pinned, it is a zombie of ``size``."""
        self.keys.pop(slot, None)
        if self.pins.get(slot, 0):
            self.zombies[slot] = size

    def lookup(
        self, keys: Sequence[str], fps: Sequence[int]
    ) -> tuple[list[bool], list[bool], list[tuple[int, ...]]]:
        found, occupied, rows = [], [], []
        for key, fp in zip(keys, fps, strict=True):
            r, row = self._find(key, fp)
            found.append(r == 1)
            occupied.append(r >= 0)
            rows.append(row or (0, 0, 0))
        return found, occupied, rows

    def read_into(
        self, keys: Sequence[str], fps: Sequence[int], arena: bytes, pages: Sequence[Sequence[int]]
    ) -> tuple[int, list[bool] | None, int, list[list[bytes] | None]]:
        """``pages``: each page's part lengths. (hits, hit or None, freed list length, the bytes
        each page's parts got: None for a page not copied)."""
        got: list[list[bytes] | None] = []
        for key, fp, parts in zip(keys, fps, pages, strict=True):
            r, row = self._find(key, fp)
            if r != 1 or row is None or row[1] & ((1 << 48) - 1) != sum(parts):
                got.append(None)
                continue
            if row[0] + sum(parts) > len(arena):
                raise ValueError("outside an arena")
            pos, out = row[0], []
            for n in parts:
                out.append(arena[pos : pos + n])
                pos += n
            got.append(out)
        for page, fp in zip(got, fps, strict=True):
            if page is not None:
                row = self.rows[fp]
                slot = row[0] >> self.shift
                self.reads[slot] = min(self.reads.get(slot, 0) + 1, (1 << 32) - 2)
        hits = sum(page is not None for page in got)
        return hits, None if hits == len(keys) else [page is not None for page in got], len(self.freed), got

    def pin(self, offsets: Sequence[int]) -> list[int]:
        slots = [self._slot(o) for o in offsets]
        out = []
        for slot in slots:
            self.pins[slot] = self.pins.get(slot, 0) + 1
            out.append(0 if slot in self.zombies else self.reads.get(slot, 0))
        return out

    def pin_found(
        self, keys: Sequence[str], fps: Sequence[int]
    ) -> tuple[list[bool], list[tuple[int, ...]], list[int]]:
        found, _occupied, rows = self.lookup(keys, fps)
        reads = [self.pin([row[0]])[0] if ok else 0 for ok, row in zip(found, rows, strict=True)]
        return found, rows, reads

    def unpin(self, offsets: Sequence[int]) -> int:
        slots = [self._slot(o) for o in offsets]
        left = dict(self.pins)
        for slot in slots:
            if left.get(slot, 0) == 0:
                raise ValueError(f"slot {slot} is not pinned")
            left[slot] -= 1
        for slot in slots:
            self.pins[slot] -= 1
            if not self.pins[slot]:
                del self.pins[slot]
                if slot in self.zombies:
                    self.freed.append((slot << self.shift, self.zombies.pop(slot)))
                    self.reads[slot] = 0
        return len(self.freed)

    def take_freed(self) -> list[tuple[int, int]]:
        out, self.freed = self.freed, []
        return out

    def publish(
        self, keys: Sequence[str], fps: Sequence[int], rows: Sequence[tuple[int, int, int]]
    ) -> list[int]:
        slots = [self._slot(row[0]) for row in rows]
        if any(s in self.keys or s in self.zombies for s in slots) or len(set(slots)) != len(slots):
            raise ValueError("a slot holds a key or a zombie, or is given twice")
        out = []
        for key, fp, row, slot in zip(keys, fps, rows, slots, strict=True):
            r, _ = self._find(key, fp)
            if r >= 0:
                out.append(0 if r == 1 else -1)
                continue
            self.rows[fp] = tuple(row)  # type: ignore[assignment]
            self.keys[slot] = key
            self.reads[slot] = 0
            out.append(1)
        return out

    def remove(self, fps: Sequence[int], offsets: Sequence[int]) -> tuple[int, list[bool]]:
        slots = [self._slot(o) for o in offsets]
        removed, pinned = 0, []
        for fp, offset, slot in zip(fps, offsets, slots, strict=True):
            pinned.append(self.pins.get(slot, 0) > 0)
            row = self.rows.get(fp)
            if row is not None and row[0] == offset:
                del self.rows[fp]
                self._drop(slot, row[1] & ((1 << 48) - 1))
                removed += 1
        return removed, pinned

    def move(self, fp: int, key: str, old: int, new: int) -> bool:
        old_slot, new_slot = self._slot(old), self._slot(new)
        r, row = self._find(key, fp)
        if r != 1 or row is None or row[0] != old or old_slot == new_slot:
            return False
        if new_slot in self.keys or new_slot in self.zombies:
            raise ValueError("new_offset holds a published key or a pinned removed object")
        if not self.pins.get(old_slot, 0):
            raise ValueError("old_offset is not pinned by the caller")
        self.rows[fp] = (new, row[1], row[2])
        self.keys[new_slot] = self.keys.pop(old_slot)
        self.reads[new_slot] = self.reads.get(old_slot, 0)
        self._drop(old_slot, row[1] & ((1 << 48) - 1))
        return True

    def clear(self) -> None:
        for row in self.rows.values():
            self._drop(row[0] >> self.shift, row[1] & ((1 << 48) - 1))
        self.rows.clear()

    def state(self) -> tuple[list[tuple[str, int, tuple[int, ...]]], dict[int, int]]:
        """Rows with their keys (sorted by fingerprint) and the pinned slots' offsets -> pins."""
        rows = sorted((self.keys[row[0] >> self.shift], fp, row) for fp, row in self.rows.items())
        return rows, {slot << self.shift: n for slot, n in self.pins.items() if n}


def ref_encode_keyed(keys: Sequence[str], trailers: bytes, trailer_size: int, max_key_len: int) -> bytes:
    """The wire's keyed list as the Python codec wrote it: count u32, then per key u16 length,
    UTF-8 bytes and its trailer (ValueError for a key that cannot go on the wire)."""
    import struct

    if len(trailers) != len(keys) * trailer_size:
        raise ValueError("trailers length")
    out = [struct.pack("!I", len(keys))]
    for i, key in enumerate(keys):
        try:
            raw = key.encode()
        except UnicodeEncodeError:
            raise ValueError(f"key {i} is not encodable as UTF-8") from None
        if not 0 < len(raw) <= max_key_len:
            raise ValueError(f"key {i} has {len(raw)} bytes, outside 1..{max_key_len}")
        out += [struct.pack("!H", len(raw)), raw, trailers[i * trailer_size : (i + 1) * trailer_size]]
    return b"".join(out)


def ref_decode_keyed(
    meta: bytes, offset: int, trailer_size: int, max_key_len: int, max_batch: int
) -> tuple[list[str], bytes, int]:
    """The reader the Python codec had: ValueError for a list that is not well formed."""
    import struct

    pos = offset
    if len(meta) - pos < 4:
        raise ValueError("truncated meta")
    (count,) = struct.unpack_from("!I", meta, pos)
    pos += 4
    if count > max_batch:
        raise ValueError(f"batch of {count} exceeds limit {max_batch}")
    keys, trailers = [], []
    for _ in range(count):
        if len(meta) - pos < 2:
            raise ValueError("truncated meta")
        (n,) = struct.unpack_from("!H", meta, pos)
        pos += 2
        if not 0 < n <= max_key_len:
            raise ValueError(f"key length {n} outside 1..{max_key_len}")
        if len(meta) - pos < n + trailer_size:
            raise ValueError("truncated meta")
        try:
            keys.append(meta[pos : pos + n].decode())
        except UnicodeDecodeError:
            raise ValueError("key is not UTF-8") from None
        pos += n
        trailers.append(meta[pos : pos + trailer_size])
        pos += trailer_size
    return keys, b"".join(trailers), pos
