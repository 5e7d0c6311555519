"""Bit flips and truncations in region files are detected and served as misses (never wrong bytes)."""

from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pytest
from ssd_helpers import check_get, open_engine, size_for, value_for

from hicache_mooncake.cli import main as cli_main
from hicache_mooncake.ssd import SsdCorruptionError
from hicache_mooncake.ssd.format import BLOCK, ENTRY_FIXED_SIZE, REGION_HEADER_SIZE, parse_region_file_name
from hicache_mooncake.ssd.fsck import fsck
from hicache_mooncake.ssd.recover import scan_region

CAP = 8 << 20
RS = 1 << 20


def _populate(d: str, n: int = 60, direct: str = "off") -> dict[str, int]:
    keys = {f"c{i}": size_for(f"c{i}", 1, 60_000) for i in range(n)}
    with open_engine(d, capacity_bytes=CAP, region_size=RS, direct_io=direct) as e:
        items = list(keys.items())
        for j in range(0, n, 7):
            assert all(e.put_batch([(k, [memoryview(value_for(k, s))]) for k, s in items[j : j + 7]]))
    return keys


def _layout(d: str) -> dict[str, list[tuple[str, int, int, int]]]:
    """region file -> [(key, entry offset, covered header bytes, payload len)]"""
    out: dict[str, list[tuple[str, int, int, int]]] = {}
    for name in sorted(os.listdir(d)):
        rid = parse_region_file_name(name)
        if rid is None:
            continue
        path = os.path.join(d, name)
        scan = scan_region(path, rid, RS, None)
        out[path] = [
            (e.key, e.offset, ENTRY_FIXED_SIZE + len(e.key.encode()), e.payload_len) for e in scan.entries
        ]
    return out


def _affected(layout: list[tuple[str, int, int, int]], pos: int) -> set[str]:
    hit = set()
    for key, off, hlen, plen in layout:
        if off <= pos < off + hlen or off + BLOCK <= pos < off + BLOCK + plen:
            hit.add(key)
    return hit


@pytest.mark.parametrize("verify_on_recover", [True, False])
def test_bit_flip_and_truncation_fuzz(tmp_path, verify_on_recover: bool) -> None:  # type: ignore[no-untyped-def]
    pristine = str(tmp_path / "pristine")
    keys = _populate(pristine)
    layout = _layout(pristine)
    files = [p for p, entries in layout.items() if entries]  # (the standby region holds none)
    rng = random.Random(1234 + verify_on_recover)
    for rnd in range(24):
        work = str(tmp_path / f"w{rnd}")
        shutil.copytree(pristine, work)
        wfiles = {p: os.path.join(work, os.path.basename(p)) for p in files}
        must_miss: set[str] = set()
        must_hit: set[str] = set(keys)
        path = rng.choice(files)
        if rnd % 3 == 2:  # truncation
            size = os.path.getsize(path)
            used = max(off + BLOCK + plen for _, off, _, plen in layout[path])
            cut = rng.randrange(0, used)
            os.truncate(wfiles[path], cut)
            for key, off, _h, plen in layout[path]:
                if cut <= off + BLOCK + plen - 1 or cut < BLOCK:
                    must_miss.add(key)
            assert size >= cut
        else:  # a few random bit flips, biased to land inside entries
            with open(wfiles[path], "r+b") as f:
                for _ in range(rng.randint(1, 4)):
                    key, off, hlen, plen = rng.choice(layout[path])
                    pos = (
                        rng.choice([off + rng.randrange(hlen), off + BLOCK + rng.randrange(max(plen, 1))])
                        if plen
                        else off + rng.randrange(hlen)
                    )
                    if rng.random() < 0.1:
                        pos = rng.randrange(0, REGION_HEADER_SIZE)  # region header (hashed part)
                    f.seek(pos)
                    b = f.read(1)[0]
                    f.seek(pos)
                    f.write(bytes([b ^ (1 << rng.randrange(8))]))
                    must_miss |= _affected(layout[path], pos)
                    if pos < REGION_HEADER_SIZE:
                        must_miss |= {k for k, *_ in layout[path]}
        must_hit -= {k for k, *_ in layout[path]}  # other regions are untouched
        with open_engine(work, capacity_bytes=CAP, region_size=RS, verify_on_recover=verify_on_recover) as e:
            for key, size in keys.items():
                got = check_get(e, key, size)  # asserts bytes are right on every hit
                if key in must_miss:
                    assert not got, f"round {rnd}: corrupted entry {key} was served"
                if key in must_hit:
                    assert got, f"round {rnd}: intact entry {key} lost"
            st = e.stats()
            if must_miss:
                assert (
                    st["corrupt"]
                    + st["torn"]
                    + st["recover_bad_region_headers"]
                    + (len(keys) - st["entries"])
                    > 0
                )
        shutil.rmtree(work)


def test_corruption_while_open_is_a_counted_miss(ssd_dir: str) -> None:
    keys = _populate(ssd_dir, n=10)
    layout = _layout(ssd_dir)
    path, entries = next(iter(layout.items()))
    key, off, _h, plen = entries[0]
    with open_engine(ssd_dir, capacity_bytes=CAP, region_size=RS) as e:
        with open(path, "r+b") as f:
            f.seek(off + BLOCK + plen // 2)
            b = f.read(1)[0]
            f.seek(off + BLOCK + plen // 2)
            f.write(bytes([b ^ 0x10]))
        assert not check_get(e, key, keys[key])
        st = e.stats()
        assert st["read_checksum_errors"] == 1 and not e.contains(key)
        for k, s in keys.items():
            if k != key:
                assert check_get(e, k, s)


def _flip_payload(d: str) -> tuple[str, int, str]:
    layout = _layout(d)
    path, entries = next(iter(layout.items()))
    key, off, _h, plen = entries[len(entries) // 2 - 1]
    with open(path, "r+b") as f:
        f.seek(off + BLOCK + plen - 1)
        b = f.read(1)[0]
        f.seek(off + BLOCK + plen - 1)
        f.write(bytes([b ^ 1]))
    return path, off, key


def test_strict_refuses_corruption_with_file_and_offset(ssd_dir: str) -> None:
    _populate(ssd_dir, n=20)
    path, off, _ = _flip_payload(ssd_dir)
    with pytest.raises(SsdCorruptionError) as ei:
        open_engine(ssd_dir, capacity_bytes=CAP, region_size=RS, strict=True)
    assert path in str(ei.value) and f"offset {off}" in str(ei.value)
    # default mode opens (from the region summaries), and the entry is a counted miss on read
    with open_engine(ssd_dir, capacity_bytes=CAP, region_size=RS) as e:
        keys = list(e.keys())
        served = sum(e.get_into(k, [memoryview(bytearray(e.object_size(k) or 0))]) for k in keys)
        assert served == 19 and e.stats()["corrupt"] == 1


def test_fsck_report_repair_and_cli_exit_codes(ssd_dir: str, capsys) -> None:  # type: ignore[no-untyped-def]
    keys = _populate(ssd_dir, n=20)
    rep = fsck([ssd_dir])
    assert rep.clean and rep.entries == 20 and rep.bytes == sum(keys.values())
    assert cli_main(["fsck", ssd_dir]) == 0
    _path, _off, bad_key = _flip_payload(ssd_dir)
    rep = fsck([ssd_dir])
    assert not rep.clean and rep.corrupt == 1 and rep.entries == 19
    assert any(r.corrupt == 1 for r in rep.regions)
    capsys.readouterr()
    assert cli_main(["fsck", ssd_dir, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["corrupt"] == 1 and data["clean"] is False
    assert cli_main(["fsck", ssd_dir, "--repair"]) == 1  # found (and repaired)
    rep = fsck([ssd_dir])
    assert rep.clean and rep.dead == 1 and rep.entries == 19
    assert cli_main(["fsck", ssd_dir]) == 0
    with open_engine(ssd_dir, capacity_bytes=CAP, region_size=RS, strict=True) as e:
        assert e.stats()["entries"] == 19
        assert not e.contains(bad_key)
        for k, s in keys.items():
            assert check_get(e, k, s) == (k != bad_key)
    # repair refuses while an engine holds the directory
    with open_engine(ssd_dir, capacity_bytes=CAP, region_size=RS):
        assert cli_main(["fsck", ssd_dir, "--repair"]) == 2
    assert cli_main(["fsck", str(ssd_dir) + "/nope"]) == 2


def test_truncated_region_file_tail_is_torn(ssd_dir: str) -> None:
    keys = _populate(ssd_dir, n=12)
    layout = _layout(ssd_dir)
    path = max(layout, key=lambda p: len(layout[p]))
    last_key, off, _h, plen = layout[path][-1]
    os.truncate(path, off + BLOCK + plen // 2)
    rep = fsck([ssd_dir])
    assert rep.torn == 1 and rep.corrupt == 0
    with open_engine(ssd_dir, capacity_bytes=CAP, region_size=RS) as e:
        assert e.stats()["recover_torn"] == 1
        for k, s in keys.items():
            assert check_get(e, k, s) == (k != last_key)
        # the truncated region is usable again once reclaimed; writes keep working
        assert e.put("new", [memoryview(np.ones(10, np.uint8))])
