import pytest

from hicache_mooncake.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (4096, 4096),
        ("4096", 4096),
        ("64GiB", 64 << 30),
        ("64 GiB", 64 << 30),
        ("1.5MiB", 3 << 19),
        ("512MB", 512_000_000),
        ("2KiB", 2048),
        ("2kb", 2000),
        ("1TiB", 1 << 40),
    ],
)
def test_parse_size_accepts_operator_spellings(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "-1", "12XB", "1.2.3GiB", True, -5, "2G", "2k", "1T", "512m"])
def test_parse_size_rejects_junk_naming_it(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


def test_format_size_round_trips_binary_units():
    assert format_size(3 << 30) == "3.0GiB"
    assert format_size(100) == "100B"
