"""fsck reports an entry written into a region it does not belong to, whatever its generation:
a header of an older generation inside the region's chain of live entries overwrote a live entry
there (a misdirected write), it is not a harmless leftover of an earlier life."""

from __future__ import annotations

from ssd_helpers import check_get, open_engine, size_for, value_for
from test_ssd_fsck import CAP, RS, _engine_view, _regions

from hicache_mooncake.cli import main as cli_main
from hicache_mooncake.ssd.format import BLOCK
from hicache_mooncake.ssd.fsck import fsck
from hicache_mooncake.ssd.recover import scan_region


def _put(d: str, keys: dict[str, int]) -> None:
    with open_engine(d, capacity_bytes=CAP, region_size=RS, direct_io="off") as e:
        items = list(keys.items())
        for j in range(0, len(items), 5):
            assert all(e.put_batch([(k, [memoryview(value_for(k, s))]) for k, s in items[j : j + 5]]))


def test_an_entry_of_an_older_generation_inside_the_live_chain_is_misdirected(ssd_dir: str) -> None:
    first = {f"a{i}": size_for(f"a{i}", 1000, 100_000) for i in range(10)}
    second = {f"b{i}": size_for(f"b{i}", 1000, 100_000) for i in range(10)}
    _put(ssd_dir, first)
    _put(ssd_dir, second)  # a later boot: its regions' generations are above every entry of the first
    regions = _regions(ssd_dir)
    (rs_, source, _), (rt, target, _) = regions[0], regions[-1]
    src = scan_region(source, rs_, RS, None)
    dst = scan_region(target, rt, RS, None)
    assert len(dst.entries) >= 3 and src.entries[0].seq < dst.header.gen  # type: ignore[union-attr]
    with open(source, "rb") as f:
        f.seek(src.entries[0].offset)
        block = f.read(BLOCK)
    with open(target, "r+b") as f:  # the older entry's header lands on a live entry of the newer region
        f.seek(dst.entries[1].offset)
        f.write(block)
    keys = {**first, **second}
    rep = fsck([ssd_dir])
    assert not rep.clean and rep.corrupt == 1, rep.summary()
    problems = [p for r in rep.regions for p in r.problems]
    assert [p["offset"] for p in problems] == [dst.entries[1].offset], problems
    assert "misdirected" in problems[0]["reason"]
    assert "NOT CLEAN" in rep.summary()
    assert cli_main(["fsck", ssd_dir]) == 1
    served, st = _engine_view(ssd_dir, keys)  # the engine agrees: one entry lost, counted corrupt
    assert st["corrupt"] >= 1 and served == rep.entries == len(keys) - 1
    assert cli_main(["fsck", ssd_dir, "--repair"]) == 1
    assert fsck([ssd_dir]).clean
    with open_engine(ssd_dir, capacity_bytes=CAP, region_size=RS, direct_io="off") as e:
        assert sum(check_get(e, k, s) for k, s in keys.items()) == served


def test_leftovers_of_an_earlier_life_after_the_chain_stay_harmless(ssd_dir: str) -> None:
    """The same older header past the region's last live entry is a stale leftover: clean."""
    first = {f"a{i}": size_for(f"a{i}", 1000, 100_000) for i in range(10)}
    _put(ssd_dir, first)
    _put(ssd_dir, {"b0": 5000})
    regions = _regions(ssd_dir)
    (rs_, source, _), (rt, target, _) = regions[0], regions[-1]
    src = scan_region(source, rs_, RS, None)
    dst = scan_region(target, rt, RS, None)
    with open(source, "rb") as f:
        f.seek(src.entries[0].offset)
        block = f.read(BLOCK)
    with open(target, "r+b") as f:
        f.seek(dst.end_offset + 4 * BLOCK)
        f.write(block)
    rep = fsck([ssd_dir])
    assert rep.clean and rep.stale == 1, rep.summary()
