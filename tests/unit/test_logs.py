"""Logs: one line per cause per interval with a count, tracebacks once, everywhere below the
``hicache_mooncake`` logger (the real mover and SSD engine failing on every batch / entry); our level
follows the root logger's (SGLang's ``--log-level``) unless the YAML sets ``log_level``."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from log_lines import Lines

from hicache_mooncake import logs
from hicache_mooncake.config import validate_config
from hicache_mooncake.ssd import SsdEngine, SsdOptions
from hicache_mooncake.tiers.dram_tier import DramTier
from hicache_mooncake.tiers.mover import Mover
from hicache_mooncake.tiers.ssd_tier import SsdTier


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def root_lines(clock: FakeClock) -> Iterator[Lines]:
    """The limiter installed with a fake clock, a capturing handler on the root logger."""
    root = logging.getLogger()
    lines = Lines()
    root.addHandler(lines)
    ours = logging.getLogger(logs.LOGGER_NAME)
    old_level = ours.level
    logs.install(logs.RepeatLimiter(interval_s=60.0, clock=clock))
    ours.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(lines)
        logs.uninstall()
        ours.setLevel(old_level)


def _fail(exc: BaseException) -> None:
    raise exc


def test_repeats_collapse_into_one_line_per_interval_with_a_count(
    root_lines: Lines, clock: FakeClock
) -> None:
    log = logging.getLogger("hicache_mooncake.tiers.example")
    for i in range(500):
        try:
            _fail(OSError(28, "No space left on device"))
        except OSError:
            log.exception("demotion of %s failed", f"key{i}")
        clock.now += 0.01
    first = root_lines.matching("demotion of")
    assert len(first) == 1 and "key0" in first[0] and "Traceback" in first[0]
    clock.now += 60
    try:
        _fail(OSError(28, "No space left on device"))
    except OSError:
        log.exception("demotion of %s failed", "key500")
    lines = root_lines.matching("demotion of")
    assert len(lines) == 2
    assert "key500" in lines[1] and "[499 more like this in the last" in lines[1]
    assert "Traceback" not in lines[1] and "No space left on device" in lines[1]  # one-line summary


def test_other_causes_are_not_hidden(root_lines: Lines) -> None:
    log = logging.getLogger("hicache_mooncake.transport.example")
    for i in range(10):
        log.warning("node %s unreachable", f"n{i}")  # one cause, whatever the node
        log.warning("metadata service unavailable")
        log.error("node %s unreachable", "b")  # another level: another cause
    assert len(root_lines.matching("unreachable")) == 2
    assert len(root_lines.matching("metadata service")) == 1


def test_a_cause_that_stopped_gets_its_count_later(root_lines: Lines, clock: FakeClock) -> None:
    log = logging.getLogger("hicache_mooncake.ssd")
    for _ in range(5):
        log.warning("ssd put_batch failed")
    clock.now += 61
    log.warning("something else")  # anything logged later reports the pending count
    assert root_lines.matching("ssd put_batch failed")[-1].endswith("[3 more like this in the last 61s]")
    for _ in range(3):
        log.warning("ssd put_batch failed")
    logs.flush()  # and at exit
    assert root_lines.matching("ssd put_batch failed")[-1].endswith("[2 more like this in the last 0s]")


def test_info_lines_collapse_only_when_identical_and_debug_is_not_limited(root_lines: Lines) -> None:
    log = logging.getLogger("hicache_mooncake.ssd")
    for d in ("a", "b", "a", "a"):
        log.info("ssd engine %s: io mode direct", d)
    for _ in range(3):
        log.debug("detail %d", 1)
    assert root_lines.matching("ssd engine") == [
        "INFO hicache_mooncake.ssd: ssd engine a: io mode direct",
        "INFO hicache_mooncake.ssd: ssd engine b: io mode direct",
    ]
    assert len(root_lines.matching("detail 1")) == 3


def test_explicit_causes_share_a_template(root_lines: Lines) -> None:
    """FailureLog logs every cause with one template: the cause it names keeps them apart."""
    from hicache_mooncake.failures import FailureLog

    failures = FailureLog()
    for _ in range(20):
        failures.record("batch_get_v1 failed", RuntimeError("x"))
        failures.record("batch_set_v1 failed", RuntimeError("y"))
    assert len(root_lines.matching("batch_get_v1 failed")) == 1
    assert len(root_lines.matching("batch_set_v1 failed")) == 1
    assert failures.snapshot() == {"batch_get_v1 failed": 20, "batch_set_v1 failed": 20}


def test_mover_loop_failing_on_every_batch_logs_one_traceback(root_lines: Lines, tmp_path: Path) -> None:
    """The real DRAM -> SSD mover over a real DRAM tier and SSD tier: its store (the listener)
    fails on every batch it moved; the loop logs and retries, one line for all of them."""

    class BrokenStore:
        batches = 0

        def moved(self, keys: Sequence[str]) -> None:
            BrokenStore.batches += 1
            raise RuntimeError("store bookkeeping broke")

        def lost(self, keys: Sequence[str]) -> None:
            raise RuntimeError("store bookkeeping broke")

    dram = DramTier(4 << 20, slab_size=1 << 20, prefault=False)
    engine = SsdEngine(SsdOptions(dirs=(str(tmp_path),), capacity_bytes=8 << 20, region_size=1 << 20))
    mover = Mover(dram, SsdTier(engine), BrokenStore(), batch_items=1, interval_s=0.001)
    page = np.zeros(16 << 10, dtype=np.uint8)
    keys = [f"k{i}" for i in range(40)]
    try:
        for key in keys:
            dram.put(key, [memoryview(page)])
        mover.demote_later(keys)
        assert mover.flush(timeout_s=60)
    finally:
        mover.close()
        dram.close()
        engine.close()
    assert BrokenStore.batches == 40 and mover.stats()["errors"] == 40
    lines = root_lines.matching("background DRAM -> SSD move failed")
    assert len(lines) == 1 and lines[0].count("Traceback") == 1


def test_ssd_engine_callback_failing_for_every_entry_logs_one_traceback(
    root_lines: Lines, tmp_path: Path
) -> None:
    """The SSD engine (which knows nothing of our logging setup): region reclaim evicts entries,
    the eviction callback fails for each, one line."""
    engine = SsdEngine(SsdOptions(dirs=(str(tmp_path),), capacity_bytes=4 << 20, region_size=1 << 20))
    engine.on_evict = lambda key: _fail(RuntimeError("listener broke"))
    value = np.zeros(60 << 10, dtype=np.uint8)
    try:
        for i in range(200):
            engine.put(f"k{i}", [memoryview(value)])
    finally:
        engine.close()
    evicted = engine.stats()["evicted_entries"]
    assert evicted > 50
    lines = root_lines.matching("on_evict callback failed")
    assert len(lines) == 1 and "Traceback" in lines[0]


def test_level_follows_the_root_logger_unless_the_yaml_sets_one() -> None:
    """SGLang's ``--log-level warning`` sets the root logger's level; with ``log_level`` unset
    (the default) our INFO lines are then quiet; a YAML level wins."""
    root, ours = logging.getLogger(), logging.getLogger(logs.LOGGER_NAME)
    saved = root.level, ours.level
    logs.set_host_level(logging.NOTSET)  # inside SGLang nobody sets a host level
    try:
        root.setLevel(logging.WARNING)
        logs.configure(validate_config({}).log_level)
        assert validate_config({}).log_level == "unset"
        assert not logging.getLogger("hicache_mooncake.ssd").isEnabledFor(logging.INFO)
        root.setLevel(logging.DEBUG)
        assert logging.getLogger("hicache_mooncake.ssd").isEnabledFor(logging.DEBUG)
        logs.configure(validate_config({"log_level": "error"}).log_level)
        assert not logging.getLogger("hicache_mooncake.ssd").isEnabledFor(logging.WARNING)
        logs.configure("unset")  # a later attach without log_level follows SGLang again
        assert logging.getLogger("hicache_mooncake.ssd").isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(saved[0])
        ours.setLevel(saved[1])


def test_pytest_capture_sees_each_record_once(root_lines: Lines, caplog: pytest.LogCaptureFixture) -> None:
    """pytest attaches its capture handler to non-propagating loggers too, so it sees our raw
    records; the limiter must not hand it the forwarded copy again (other tests count records)."""
    log = logging.getLogger("hicache_mooncake.example")
    for _ in range(3):
        log.warning("same thing")
    assert len([r for r in caplog.records if r.getMessage() == "same thing"]) == 3
    assert len(root_lines.matching("same thing")) == 1
