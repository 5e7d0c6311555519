"""fsck and recovery agree (shared code), and fsck reports every loss it can see."""

from __future__ import annotations

import os

import pytest
from ssd_helpers import check_get, open_engine, size_for, value_for

from hicache_mooncake.cli import main as cli_main
from hicache_mooncake.ssd.format import BLOCK, SUPERBLOCK_NAME, parse_region_file_name, parse_region_header
from hicache_mooncake.ssd.fsck import fsck
from hicache_mooncake.ssd.recover import scan_region
from hicache_mooncake.ssd.state import STATE_NAME

CAP = 8 << 20
RS = 1 << 20


def _populate(d: str, n: int = 40) -> dict[str, int]:
    keys = {f"k{i}": size_for(f"k{i}", 1000, 150_000) for i in range(n)}
    with open_engine(d, capacity_bytes=CAP, region_size=RS, direct_io="off") as e:
        items = list(keys.items())
        for j in range(0, n, 5):
            assert all(e.put_batch([(k, [memoryview(value_for(k, s))]) for k, s in items[j : j + 5]]))
    return keys


def _regions(d: str) -> list[tuple[int, str, int]]:
    """(region id, path, gen) of live regions holding entries, oldest generation first (the
    standby region, opened ahead of need, holds none)."""
    out = []
    for name in os.listdir(d):
        rid = parse_region_file_name(name)
        if rid is not None:
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                h, _ = parse_region_header(f.read(BLOCK))
            assert h is not None
            if scan_region(path, rid, RS, None).entries:
                out.append((rid, path, h.gen))
    return sorted(out, key=lambda r: r[2])


def _engine_view(d: str, keys: dict[str, int]) -> tuple[int, dict[str, int]]:
    with open_engine(d, capacity_bytes=CAP, region_size=RS, direct_io="off") as e:
        served = sum(check_get(e, k, s) for k, s in keys.items())  # asserts bytes on every hit
        return served, e.stats()


def test_a_region_truncated_to_zero_is_a_loss(ssd_dir: str) -> None:
    keys = _populate(ssd_dir)
    _rid, path, _gen = _regions(ssd_dir)[0]
    os.truncate(path, 0)
    rep = fsck([ssd_dir])
    assert not rep.clean and any("truncated" in lost["reason"] for lost in rep.lost_regions), rep.summary()
    assert cli_main(["fsck", ssd_dir]) == 1
    served, st = _engine_view(ssd_dir, keys)
    assert st["recover_lost_regions"] == 1 and served == rep.entries < len(keys)


def test_swapped_region_files_are_a_loss(ssd_dir: str) -> None:
    keys = _populate(ssd_dir)
    (_r0, p0, _), (_r1, p1, _) = _regions(ssd_dir)[:2]
    os.rename(p0, p0 + ".x")
    os.rename(p1, p0)
    os.rename(p0 + ".x", p1)
    rep = fsck([ssd_dir])
    assert len(rep.lost_regions) == 2 and all("another region" in x["reason"] for x in rep.lost_regions)
    assert cli_main(["fsck", ssd_dir]) == 1
    served, st = _engine_view(ssd_dir, keys)
    assert st["recover_lost_regions"] == 2 and served == rep.entries


def test_a_deleted_region_is_a_loss(ssd_dir: str) -> None:
    keys = _populate(ssd_dir)
    _rid, path, _gen = _regions(ssd_dir)[1]
    os.unlink(path)
    rep = fsck([ssd_dir])
    assert [x["reason"] for x in rep.lost_regions] == ["region file missing (deleted?)"], rep.summary()
    assert cli_main(["fsck", ssd_dir]) == 1
    served, st = _engine_view(ssd_dir, keys)
    assert st["recover_missing_regions"] == 1 and served == rep.entries < len(keys)


def test_a_misdirected_entry_is_corruption(ssd_dir: str) -> None:
    """An entry written into the wrong region (over the header of an entry there)."""
    keys = _populate(ssd_dir)
    regions = _regions(ssd_dir)
    (_rt, target, _), (rs_, source, _) = regions[0], regions[-1]
    src = scan_region(source, rs_, RS, None)
    dst = scan_region(target, regions[0][0], RS, None)
    with open(source, "rb") as f:
        f.seek(src.entries[0].offset)
        block = f.read(BLOCK)
    with open(target, "r+b") as f:
        f.seek(dst.entries[1].offset)
        f.write(block)
    rep = fsck([ssd_dir])
    assert rep.corrupt >= 1 and any("misdirected" in p["reason"] for r in rep.regions for p in r.problems), (
        rep.summary()
    )
    assert cli_main(["fsck", ssd_dir]) == 1
    served, st = _engine_view(ssd_dir, keys)
    assert st["corrupt"] >= 1 and served == rep.entries < len(keys)
    assert cli_main(["fsck", ssd_dir, "--repair"]) == 1
    rep = fsck([ssd_dir])
    assert rep.clean, rep.summary()
    served2, _ = _engine_view(ssd_dir, keys)
    assert served2 == served


@pytest.mark.parametrize("damage", ["garbage_superblock", "no_superblock_no_state"])
def test_a_superblock_the_engine_tolerates_is_not_a_hard_error(ssd_dir: str, damage: str) -> None:
    keys = _populate(ssd_dir)
    with open(os.path.join(ssd_dir, SUPERBLOCK_NAME), "w") as f:
        f.write("{not json")
    if damage == "no_superblock_no_state":
        os.unlink(os.path.join(ssd_dir, SUPERBLOCK_NAME))
        os.unlink(os.path.join(ssd_dir, STATE_NAME))
    rep = fsck([ssd_dir])
    assert rep.clean and rep.warnings and rep.entries == len(keys), rep.summary()
    assert cli_main(["fsck", ssd_dir]) == 0
    served, _ = _engine_view(ssd_dir, keys)
    assert served == len(keys)


def test_fsck_of_tiers_ssd_path_checks_every_rank_directory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    base = tmp_path / "cache"
    k0 = _populate(str(base / "rank0_0_0_0"), 10)
    k1 = _populate(str(base / "rank1_0_0_0"), 12)
    rep = fsck([str(base)])
    assert rep.clean and len(rep.dirs) == 2 and rep.entries == len(k0) + len(k1)
    assert cli_main(["fsck", str(base)]) == 0
    _rid, path, _ = _regions(str(base / "rank1_0_0_0"))[0]
    os.truncate(path, 0)
    assert cli_main(["fsck", str(base)]) == 1
    assert cli_main(["fsck", str(tmp_path / "empty-nothing")]) == 2
