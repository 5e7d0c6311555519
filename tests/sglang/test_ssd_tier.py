"""DRAM + SSD through our backend (SGLang's factory, host pools): demotion, promotion,
re-attach finding SSD data, write-through, write budget, durable clear. Real files."""

from __future__ import annotations

import contextlib
import time

import pytest
import torch
from sglang_helpers import SMALL, make_backend, small_extra

from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

pytestmark = [pytest.mark.sglang, pytest.mark.integration]
PS = SMALL.page_size
PAGE = SMALL.page_bytes()  # 24 KiB


POLICIES = ["lru", "reuse"]  # every policy places pages through the one store


def ssd_extra(path, policy="lru", **ssd) -> dict:
    extra = small_extra(
        policy=policy,
        dram={"capacity": "1MiB", "slab_size": "1MiB"},
        ssd={
            "enabled": True,
            "path": str(path),
            "capacity": "16MiB",
            "region_size": "1MiB",
            "min_free": 0,
            "high_watermark": 0.5,
            "low_watermark": 0.25,
            **ssd,
        },
    )
    return extra


def keys(n: int, start: int = 0, tag: str = "s") -> list[str]:
    return [f"{tag}{i:063x}" for i in range(start, start + n)]


def write_pages(backend, host, n, tag="s", seed=0) -> dict[str, torch.Tensor]:
    """Write n pages in batches of 8 (each batch's content differs), waiting for demotion."""
    want = {}
    for b in range(0, n, 8):
        idx = host.alloc(8 * PS)
        fill_random_pages(host, idx, seed=seed + b)
        ks = keys(8, b, tag)
        assert all(backend.batch_set_v1(ks, idx))
        want.update(zip(ks, page_snapshot(host, idx), strict=True))
        host.free(idx)
        backend.store.flush()
    return want


def read_back(backend, host, want) -> int:
    dst = host.alloc(PS)
    good = 0
    for k, expected in want.items():
        if backend.batch_get_v1([k], dst) == [True]:
            assert torch.equal(page_snapshot(host, dst)[0], expected), k
            good += 1
    host.free(dst)
    return good


@pytest.mark.parametrize("policy", POLICIES)
def test_cold_pages_are_demoted_to_ssd_and_served_byte_exact(tmp_path, policy):
    backend, host = make_backend(extra=ssd_extra(tmp_path, policy))
    want = write_pages(backend, host, 120)  # 2.8 MiB through a 1 MiB DRAM tier
    stats = backend.tier_stats()["tiers"]
    assert stats["ssd"]["background"]["demoted"] > 0
    assert stats["dram"]["used_bytes"] <= 1 << 20
    assert backend.batch_exists(list(want)) == len(want)  # nothing lost: demoted, not dropped
    assert read_back(backend, host, want) == len(want)
    placement = backend.tier_stats()["tiers"]["placement"]
    assert placement["promotions"] > 0  # SSD hits came back to DRAM
    assert placement["dram_used"] <= placement["dram_capacity"]
    backend.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_reattach_with_the_same_yaml_finds_the_ssd_data(tmp_path, policy):
    extra = ssd_extra(tmp_path, policy)
    backend, host = make_backend(extra=extra)
    want = write_pages(backend, host, 64, seed=7)
    on_ssd = [k for k in want if backend.store.tier("ssd").contains(backend._keys.key(k))]
    assert on_ssd
    backend.close()
    again, host2 = make_backend(extra=extra)  # a fresh attach: recovery scans the regions
    assert again.tier_stats()["tiers"]["ssd"]["recovered_entries"] >= len(on_ssd)
    assert read_back(again, host2, {k: want[k] for k in on_ssd}) == len(on_ssd)
    again.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_write_through_copies_every_set_in_the_background(tmp_path, policy):
    """``mode: write_through`` means the same under every policy: each new page gets an SSD copy
    although DRAM has room for all of them (so a kill -9 loses none)."""
    backend, host = make_backend(
        extra=ssd_extra(tmp_path, policy, mode="write_through", high_watermark=0.99, low_watermark=0.9)
    )
    want = write_pages(backend, host, 16, tag="w")
    ssd = backend.store.tier("ssd")
    assert all(ssd.contains(backend._keys.key(k)) for k in want)
    backend.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_write_budget_drops_instead_of_blocking(tmp_path, policy):
    backend, host = make_backend(extra=ssd_extra(tmp_path, policy, write_budget_mbps=0.01))  # ~10 KB/s
    write_pages(backend, host, 80, tag="b")
    ssd = backend.tier_stats()["tiers"]["ssd"]
    assert ssd["dropped_budget"] > 0
    assert ssd["entries"] == 0
    backend.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_cold_admission_gate_keeps_unread_pages_off_the_ssd(tmp_path, policy):
    backend, host = make_backend(extra=ssd_extra(tmp_path, policy, admit_min_hits=1))
    write_pages(backend, host, 80, tag="c")
    assert backend.tier_stats()["tiers"]["ssd"]["dropped_cold"] > 0
    assert backend.tier_stats()["tiers"]["ssd"]["entries"] == 0
    backend.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_clear_is_durable_across_reattach(tmp_path, policy):
    extra = ssd_extra(tmp_path, policy)
    backend, host = make_backend(extra=extra)
    want = write_pages(backend, host, 64, tag="x")
    backend.clear()
    assert backend.batch_exists(list(want)[:1]) == 0
    backend.close()
    again, _ = make_backend(extra=extra)
    assert again.batch_exists(list(want)) == 0
    assert again.tier_stats()["tiers"]["ssd"]["entries"] == 0
    again.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_ssd_only_configuration_stores_synchronously(tmp_path, policy):
    extra = ssd_extra(tmp_path, policy)
    extra["tiers"]["dram"]["enabled"] = False
    backend, host = make_backend(extra=extra)
    assert [t.name for t in backend.store.tiers] == ["ssd"]
    idx = host.alloc(4 * PS)
    fill_random_pages(host, idx, seed=5)
    want = dict(zip(keys(4, tag="o"), page_snapshot(host, idx), strict=True))
    assert all(backend.batch_set_v1(list(want), idx))
    assert read_back(backend, host, want) == 4
    backend.close()


def test_a_second_attach_on_the_same_ssd_directory_is_refused_clearly(tmp_path):
    extra = ssd_extra(tmp_path)
    first, _ = make_backend(extra=extra)
    with pytest.raises(Exception, match="(?i)in use|lock"):
        make_backend(extra=extra)
    first.close()


@pytest.mark.parametrize("policy", POLICIES)
def test_detach_flushes_dram_pages_to_ssd_for_the_next_attach(tmp_path, policy):
    extra = ssd_extra(tmp_path, policy)
    backend, host = make_backend(extra=extra)
    idx = host.alloc(8 * PS)
    fill_random_pages(host, idx, seed=9)
    want = dict(zip(keys(8, tag="d"), page_snapshot(host, idx), strict=True))
    assert all(backend.batch_set_v1(list(want), idx))  # fits in DRAM: nothing demoted yet
    assert backend.tier_stats()["tiers"]["ssd"]["entries"] == 0
    backend.close()
    again, host2 = make_backend(extra=extra)
    assert read_back(again, host2, want) == 8
    again.close()


def test_detach_without_flush_drops_dram_pages(tmp_path):
    extra = ssd_extra(tmp_path, flush_on_detach_s=0)
    backend, host = make_backend(extra=extra)
    assert all(backend.batch_set_v1(keys(4, tag="n"), host.alloc(4 * PS)))
    backend.close()
    again, _ = make_backend(extra=extra)
    assert again.batch_exists(keys(4, tag="n")) == 0
    again.close()


@contextlib.contextmanager
def _stalling_disk(tmp_path):
    """A real frozen ext4 loop mount where the machine allows (root: CI), else a syscall stall;
    removed (or uninstalled) at the end."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ssd"))
    from stall import LoopStall, SyscallStall  # tests/ssd/stall.py

    if not LoopStall.available():
        stall = LoopStall(str(tmp_path))
    else:
        stall = SyscallStall(str(tmp_path / "stalled"))
        stall.install()
    try:
        yield stall
    finally:
        if hasattr(stall, "destroy"):
            stall.destroy()
        else:
            stall.uninstall()


def _attach_after_thaw(extra):
    """A backend over the thawed directory: the old engine's files are released once its stuck
    I/O ends, so attach is retried until then."""
    for _ in range(200):
        try:
            return make_backend(extra=extra)
        except Exception:  # noqa: BLE001 - still in use
            time.sleep(0.1)
    raise AssertionError("could not attach again after the thaw")


def test_a_stalled_disk_never_stalls_sglang(tmp_path):
    """Sets, gets, exists and detach return within io.timeout_s while the SSD is frozen; the
    tier is skipped while degraded and serves again (same bytes) after the thaw."""
    with _stalling_disk(tmp_path) as stall:
        extra = ssd_extra(stall.path)
        extra["tiers"]["dram"]["enabled"] = False
        extra.setdefault("io", {})["timeout_s"] = 1.0
        backend, host = make_backend(extra=extra)
        idx = host.alloc(4 * PS)
        fill_random_pages(host, idx, seed=11)
        want = dict(zip(keys(4, tag="f"), page_snapshot(host, idx), strict=True))
        assert all(backend.batch_set_v1(list(want), idx))
        stall.freeze()
        try:
            t0 = time.monotonic()
            assert not any(backend.batch_set_v1(keys(4, start=100, tag="f"), idx))
            assert time.monotonic() - t0 < 1.0 + 2.5
            assert backend.tier_stats()["tiers"]["ssd"]["degraded"]
            t0 = time.monotonic()
            assert backend.batch_exists(list(want)) == 0
            assert not any(backend.batch_get_v1(list(want), idx))
            assert time.monotonic() - t0 < 0.5
            t0 = time.monotonic()
            backend.close()  # detach
            assert time.monotonic() - t0 < 1.0 + 2.5
        finally:
            stall.thaw()
        again, host2 = _attach_after_thaw(extra)
        assert read_back(again, host2, want) == 4
        again.close()


def test_a_stalled_disk_under_a_full_dram_tier_never_stalls_sglang(tmp_path, caplog):
    """The default config's back-pressure path: once DRAM is full a set waits for the mover, and
    the mover waits for the disk. With the disk frozen every set still returns by io.timeout_s
    (once the tier is degraded the store runs on DRAM alone, False for a page it cannot place),
    DRAM hits are still served byte-exact, the tier says "degraded" in one log line, detach
    returns by its flush deadline, and what reached the disk before the freeze is served after
    the thaw."""
    with _stalling_disk(tmp_path) as stall:
        extra = ssd_extra(stall.path, flush_on_detach_s=1.0)
        extra.setdefault("io", {})["timeout_s"] = 1.0
        backend, host = make_backend(extra=extra)
        before = write_pages(backend, host, 64, tag="b", seed=1)  # 1.5 MiB: the coldest went to SSD
        on_ssd = backend.tier_stats()["tiers"]["ssd"]["entries"]
        assert on_ssd >= 8
        with caplog.at_level("WARNING", logger="hicache_mooncake"):
            stall.freeze()
            try:
                placed: dict[str, torch.Tensor] = {}
                for b in range(0, 96, 8):  # 2.3 MiB into a 1 MiB DRAM tier
                    idx = host.alloc(8 * PS)
                    fill_random_pages(host, idx, seed=100 + b)
                    ks = keys(8, 100 + b, tag="f")
                    t0 = time.monotonic()
                    ok = backend.batch_set_v1(ks, idx)
                    assert time.monotonic() - t0 < 1.0 + 2.5, f"set of batch {b // 8} took too long"
                    placed.update(
                        (k, p) for k, p, good in zip(ks, page_snapshot(host, idx), ok, strict=True) if good
                    )
                    host.free(idx)
                assert placed  # the degraded SSD is skipped: DRAM takes new pages (its coldest drop out)
                t0 = time.monotonic()
                served = read_back(backend, host, placed)  # byte-checked; a lost demotion is a miss
                assert time.monotonic() - t0 < 1.0 + 2.5
                assert served > 0  # DRAM hits stay hits while the disk is frozen
                assert backend.tier_stats()["tiers"]["ssd"]["degraded"]
                t0 = time.monotonic()
                backend.close()  # detach: the flush to the frozen disk gives up at its deadline
                assert time.monotonic() - t0 < 1.0 + 1.0 + 2.5
            finally:
                stall.thaw()
        said = [r for r in caplog.records if "degraded (" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in said]
        again, host2 = _attach_after_thaw(extra)
        assert read_back(again, host2, before) >= on_ssd  # byte-checked
        again.close()
