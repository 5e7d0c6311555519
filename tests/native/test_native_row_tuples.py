"""``row_tuples`` against its reference, ``tuple.__new__(cls, row)`` of each row built in Python:
equal rows of the same class holding the very objects given, on random shapes; bad arguments are
refused with errors naming them."""

from __future__ import annotations

import gc
import random
from typing import Any, NamedTuple

import pytest

from hicache_mooncake.native import row_tuples
from hicache_mooncake.native.row_tuples import INDEX, PER_ITEM, SHARED


class Row(NamedTuple):
    a: Any
    b: Any
    c: Any
    d: Any


def _reference(n: int, fields: tuple[Any, ...], kinds: bytes) -> list[Row]:
    def field(j: int, i: int) -> Any:
        return fields[j] if kinds[j] == SHARED else fields[j][i] if kinds[j] == PER_ITEM else i

    return [tuple.__new__(Row, [field(j, i) for j in range(4)]) for i in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_rows_equal_the_python_construction_and_share_the_objects(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randrange(0, 300)
    kinds = bytes(rng.choice((SHARED, PER_ITEM, INDEX)) for _ in range(4))
    fields = tuple(
        [object() if rng.random() < 0.5 else f"k{i}-{rng.random()}" for i in range(n)]
        if k == PER_ITEM
        else object()
        for k in kinds
    )
    got = row_tuples(Row, n, fields, kinds)
    want = _reference(n, fields, kinds)
    assert got == want
    assert all(type(r) is Row for r in got)
    for g, w in zip(got, want, strict=True):
        assert all(x is y or kinds[j] == INDEX for j, (x, y) in enumerate(zip(g, w, strict=True)))
    gc.collect()  # the rows are tracked, well-formed tuples
    assert got[0]._replace(a=1).a == 1 if got else True


def test_bad_arguments_are_refused_with_their_names() -> None:
    with pytest.raises(TypeError, match="tuple subclass"):
        row_tuples(list, 1, (1, 2, 3, 4), b"\0\0\0\0")  # type: ignore[type-var]
    with pytest.raises(ValueError, match="field 1 holds 2 items for 3 rows"):
        row_tuples(Row, 3, (1, [1, 2], 3, 4), bytes((SHARED, PER_ITEM, SHARED, SHARED)))
    with pytest.raises(TypeError, match="sequence"):
        row_tuples(Row, 3, (1, 5, 3, 4), bytes((SHARED, PER_ITEM, SHARED, SHARED)))
    with pytest.raises(ValueError, match="kind 7 of field 0"):
        row_tuples(Row, 1, (1, 2, 3, 4), bytes((7, 0, 0, 0)))
    with pytest.raises(TypeError, match="kinds bytes of its length"):
        row_tuples(Row, 1, (1, 2, 3), b"\0\0\0\0")
    with pytest.raises(ValueError, match=">= 0"):
        row_tuples(Row, -1, (1, 2, 3, 4), b"\0\0\0\0")
