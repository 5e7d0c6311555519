"""``check_page_keys`` and ``join_keys`` against their Python definitions, on seeded batches of
ASCII, non-ASCII (2- and 4-byte characters, lone surrogates), empty and over-long hashes, str
subclasses and items that are not str."""

from __future__ import annotations

import random

import pytest

from hicache_mooncake.keys import MAX_PAGE_KEY_CHARS, KeySpace, bad_page_keys, page_key_ok
from hicache_mooncake.native import check_page_keys, join_keys


class Tagged(str):
    """A str subclass (accepted as a str, joined by its value)."""


def _reference_first_bad(hashes: list[object], max_chars: int) -> int:
    return next((i for i, h in enumerate(hashes) if not (isinstance(h, str) and 0 < len(h) <= max_chars)), -1)


def _hash(rng: random.Random) -> object:
    kind = rng.random()
    alphabet = rng.choice(["0123456789abcdef", "aé€", "a\U0001f600", "x\udc80"])
    n = rng.choice([0, 1, 2, 63, 64, MAX_PAGE_KEY_CHARS, MAX_PAGE_KEY_CHARS + 1])
    text = "".join(rng.choice(alphabet) for _ in range(n))
    if kind < 0.04:
        return rng.choice([None, 7, b"abc", ["a"], 1.5])
    if kind < 0.1:
        return Tagged(text)
    return text


@pytest.mark.parametrize("seed", range(30))
def test_checks_and_joins_answer_as_their_python_definitions(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        hashes = [_hash(rng) for _ in range(rng.randrange(0, 40))]
        max_chars = rng.choice([1, 64, MAX_PAGE_KEY_CHARS])
        assert check_page_keys(hashes, max_chars) == _reference_first_bad(hashes, max_chars)
        assert bad_page_keys(hashes) == [i for i, h in enumerate(hashes) if not page_key_ok(h)]
        prefix = rng.choice(["", "org-demo/0123abcd/", "modèle/\U0001f600/"])
        tail = rng.choice(["", "@tp0of1", ".mamba~ab12@tp3of4", "@é"])
        strs = [h for h in hashes if isinstance(h, str)]
        joined = join_keys(prefix, strs, tail)
        assert joined == [prefix + h + tail for h in strs]
        assert all(type(k) is str for k in joined)


def test_an_item_that_is_not_a_str_is_named() -> None:
    with pytest.raises(TypeError, match=r"hashes\[2\] must be str, got bytes"):
        join_keys("p/", ["a", "b", b"c"], "@t")  # type: ignore[list-item]
    with pytest.raises(TypeError, match="prefix and tail must be str"):
        join_keys(b"p/", ["a"], "@t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hashes must be a sequence"):
        check_page_keys(5, 10)  # type: ignore[arg-type]


def test_the_key_space_makes_the_keys_it_always_made() -> None:
    space = KeySpace(prefix="org-demo-model/00ff/", suffix="@tp1of2", tag=".mamba~beef")
    hashes = [f"{i:064x}" for i in range(5)] + ["é" * 3]
    assert (
        space.keys(hashes)
        == [space.key(h) for h in hashes]
        == [f"org-demo-model/00ff/{h}.mamba~beef@tp1of2" for h in hashes]
    )
    with pytest.raises(ValueError, match="non-empty string"):
        space.keys(["a", ""])
