"""The DRAM arena's prefault: in the background from attach on, stoppable by close, never a byte
changed (sets write while it runs)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from hicache_mooncake.native import prefault as arena_prefault
from hicache_mooncake.tiers.dram_arena import DramArena

MiB = 1 << 20


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _prefault_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hicache-prefault"]


def test_attach_returns_before_the_prefault_which_then_faults_the_whole_arena_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real, go = arena_prefault._advise_populate, threading.Event()

    def held_back(view: np.ndarray) -> None:
        assert go.wait(30)
        real(view)

    monkeypatch.setattr(arena_prefault, "_advise_populate", held_back)
    before = _rss()
    arena = DramArena(256 * MiB)
    try:
        assert not arena.wait_prefaulted(0.05)  # constructed while no page is faulted in yet
        assert _rss() - before < 64 * MiB
        go.set()
        assert arena.wait_prefaulted(30)
        assert _rss() - before >= 240 * MiB
        assert arena.bytes[::4096].sum() == 0  # faulted in as zeros, nothing written
    finally:
        go.set()
        arena.close()
    assert not _prefault_threads()


def test_close_stops_the_prefault_within_a_chunk_and_releases_the_mapping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real, first_done, chunks = arena_prefault._advise_populate, threading.Event(), []

    def counted(view: np.ndarray) -> None:
        real(view)
        chunks.append(view.nbytes)
        first_done.set()
        if len(chunks) == 1:
            assert release.wait(30)

    release = threading.Event()
    monkeypatch.setattr(arena_prefault, "_advise_populate", counted)
    arena = DramArena(1024 * MiB)
    assert first_done.wait(30)
    prefault = arena._prefault
    assert prefault is not None
    threading.Timer(0.1, release.set).start()
    arena.close()  # waits for the chunk in flight, then no other chunk runs
    assert arena.closed and not _prefault_threads()
    assert not prefault.completed and len(chunks) == 1
    assert arena.wait_prefaulted(0)


def test_the_prefault_never_changes_a_byte_a_set_wrote() -> None:
    arena = DramArena(128 * MiB, prefault=False)
    try:
        rng = np.random.default_rng(7)
        pattern = rng.integers(0, 256, 64 * MiB, dtype=np.uint8)
        arena.bytes[32 * MiB : 96 * MiB] = pattern
        arena_prefault.populate_range(arena.bytes)  # the kernel's advice
        prefault = arena_prefault.ArenaPrefault(arena.bytes)
        assert prefault.wait(30) and prefault.completed
        assert np.array_equal(arena.bytes[32 * MiB : 96 * MiB], pattern)
        assert not arena.bytes[: 32 * MiB].any() and not arena.bytes[96 * MiB :].any()
    finally:
        arena.close()


def test_without_the_kernel_advice_the_background_prefault_writes_nothing_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unsupported(view: np.ndarray) -> None:
        raise arena_prefault.PopulateUnsupported()

    monkeypatch.setattr(arena_prefault, "_advise_populate", unsupported)
    before = _rss()
    with caplog.at_level(logging.INFO, logger=arena_prefault.__name__):
        arena = DramArena(128 * MiB)
        try:
            assert arena.wait_prefaulted(30)
            assert _rss() - before < 64 * MiB  # nothing touched: sets fault in what they use
            assert "no MADV_POPULATE_WRITE" in caplog.text
            arena.populate(0, 64 * MiB)  # growing a tier touches the new range itself
            assert _rss() - before >= 60 * MiB
            assert not arena.bytes.any()
        finally:
            arena.close()


def test_an_unbacked_range_ends_the_prefault_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_memory(view: np.ndarray) -> None:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(arena_prefault, "_advise_populate", no_memory)
    with caplog.at_level(logging.WARNING, logger=arena_prefault.__name__):
        arena = DramArena(64 * MiB)
        try:
            assert arena.wait_prefaulted(30)
            assert "prefault stopped" in caplog.text
            arena.bytes[:4096] = 1  # the tier still works: the page faults in on the write
            assert arena.bytes[:4096].all()
        finally:
            arena.close()
