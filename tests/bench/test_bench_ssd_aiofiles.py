"""The aiofiles leg of ``bench ssd``: the same pages of SGLang's host pool written through
aiofiles' thread pool and read back into the pool. What a reader of its figure relies on: every
page it counts as served was read whole and compared with what was written (a wrong byte is a bad
page, a short read a missed one), and the file holds exactly the pages at their offsets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hicache_mooncake.tools.bench._aiofiles_io import aiofiles_get, aiofiles_set
from hicache_mooncake.tools.bench._sglang_io import PageStamps, page_workload

PAGE = 64 << 10


def _tags(b: int, j: int) -> int:
    return 7 << 40 | b << 16 | j


@pytest.fixture(scope="module")
def workload() -> Iterator[tuple[Any, PageStamps]]:
    w = page_workload(PAGE, 20 * PAGE, batch_max=8)  # 20 pages: batches of 8, 8 and 4
    stamps = PageStamps(w.host)
    yield w, stamps
    stamps.close()


def test_pages_round_trip_through_aiofiles_and_every_page_is_checked(
    workload: tuple[Any, PageStamps], tmp_path: Path
) -> None:
    w, stamps = workload
    path = str(tmp_path / "a.dat")
    put = aiofiles_set(path, w.batches, w.batch, w.src, stamps, _tags)
    assert put.ok_pages == w.pages == 20 and put.seconds > 0 and put.cpu_seconds >= 0
    assert os.path.getsize(path) == w.pages * PAGE
    got = aiofiles_get(path, w.batches, w.batch, w.src, w.dst, stamps, _tags)
    assert (got.ok_pages, got.bad_pages) == (20, 0) and got.seconds > 0


def test_a_wrong_byte_is_a_bad_page_and_a_short_read_a_missed_one(
    workload: tuple[Any, PageStamps], tmp_path: Path
) -> None:
    w, stamps = workload
    path = str(tmp_path / "a.dat")
    aiofiles_set(path, w.batches, w.batch, w.src, stamps, _tags)
    with open(path, "r+b") as f:  # page 5 (batch 0): one byte past its stamp changed
        f.seek(5 * PAGE + 100)
        byte = f.read(1)
        f.seek(5 * PAGE + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    got = aiofiles_get(path, w.batches, w.batch, w.src, w.dst, stamps, _tags)
    assert (got.ok_pages, got.bad_pages) == (20, 1)
    os.truncate(path, 17 * PAGE + PAGE // 2)  # page 17 half there, 18 and 19 gone
    got = aiofiles_get(path, w.batches, w.batch, w.src, w.dst, stamps, _tags)
    assert (got.ok_pages, got.bad_pages) == (17, 1)
