"""Tenants in keys: the default tenant's keys are those of earlier releases (existing caches stay
valid), another tenant's keys carry its name (the store reads it back) and its own digest (tenants
never read each other's pages), the same whichever backend builds them. What SGLang 0.5.23 passes
to a storage backend per request is read from its source: no cache salt, no ``extra_key``."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import xxhash

from hicache_mooncake.config import ConfigError, validate_config
from hicache_mooncake.keys import (
    KEY_FORMAT,
    MAX_PAGE_KEY_CHARS,
    KeySpace,
    RankInfo,
    build_keyspace,
    request_tenant,
    sidecar_keyspace,
    tenant_of_key,
    tenant_reader,
)

GEOMETRY = {"layout": "page_first", "page_size": 64, "layer_num": 2, "dtype": "torch.bfloat16"}


def test_default_tenant_keys_are_unchanged() -> None:
    identity = {**GEOMETRY, "io_path": "v1", "tenant": "", "format": KEY_FORMAT}
    digest = xxhash.xxh64_hexdigest(repr(sorted(identity.items())).encode())
    space = build_keyspace("org/model", "", GEOMETRY, "v1", RankInfo())
    assert space.key("abc") == f"org-model/{digest}/abc@tp0of1"
    assert tenant_of_key(space.key("abc")) == ""


def test_a_tenant_is_named_in_its_keys_and_salts_their_digest() -> None:
    plain = build_keyspace("m", "", GEOMETRY, "v1", RankInfo())
    a = build_keyspace("m", "team-a", GEOMETRY, "v1", RankInfo())
    b = build_keyspace("m", "team-b", GEOMETRY, "v1", RankInfo())
    assert tenant_of_key(a.key("h")) == "team-a" and tenant_of_key(b.key("h")) == "team-b"
    assert len({plain.key("h"), a.key("h"), b.key("h")}) == 3
    side = sidecar_keyspace(a, "mamba", {"x": 1}, RankInfo(), replicated=False)
    assert tenant_of_key(side.key("h")) == "team-a"
    # the same tenant's keys whichever tenant the backend itself has
    assert plain.for_tenant("team-b") == b and a.for_tenant("team-b").key("h") == b.key("h")
    assert b.for_tenant("").key("h") == plain.key("h")
    assert tenant_of_key("no-slashes") == "" and tenant_of_key("m/d/h~x") == ""


def test_a_call_may_name_its_tenant_in_extra_info() -> None:
    assert request_tenant(SimpleNamespace(extra_info={"tenant": "t1"})) == "t1"
    assert request_tenant(SimpleNamespace(extra_info={"session_id": "s"})) is None
    assert request_tenant(SimpleNamespace(prefix_keys=["a"], extra_info=None)) is None
    assert request_tenant(None) is None


@pytest.mark.parametrize("name", ["a b", "x/y", "-lead", "~", "t" * 65])
def test_bad_tenant_names_are_refused_with_their_key(name: str) -> None:
    with pytest.raises(ConfigError, match="namespace.tenant"):
        validate_config({"namespace": {"tenant": name}})
    with pytest.raises(ConfigError, match="tenants.shares"):
        validate_config({"tenants": {"shares": {name: {"dram": 0.5}}}})


def _sglang_srt() -> Path:
    spec = importlib.util.find_spec("sglang")  # without importing it
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "srt"


def test_sglang_passes_no_cache_salt_or_extra_key_to_a_storage_backend() -> None:
    """Every ``HiCacheStorageExtraInfo(...)`` SGLang builds carries only ``prefix_keys`` and an
    ``extra_info`` dict with ``session_id``: the salt and ``extra_key`` are folded into the page
    hashes. When SGLang starts passing them, this fails: map them in ``keys.request_tenant``."""
    seen = 0
    for path in _sglang_srt().rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "HiCacheStorageExtraInfo(" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if not (
                isinstance(node, ast.Call) and getattr(node.func, "id", None) == "HiCacheStorageExtraInfo"
            ):
                continue
            seen += 1
            assert not node.args, f"{path}: positional HiCacheStorageExtraInfo fields"
            for kw in node.keywords:
                assert kw.arg in ("prefix_keys", "extra_info"), f"{path}: passes {kw.arg}"
                if kw.arg == "extra_info" and isinstance(kw.value, ast.Dict):
                    names = {k.value for k in kw.value.keys if isinstance(k, ast.Constant)}
                    assert names <= {"session_id"}, f"{path}: extra_info carries {names}"
    assert seen >= 3, "SGLang's HiCacheStorageExtraInfo constructions were not found"


def test_a_batch_of_page_hashes_is_keyed_like_each_alone_and_a_bad_one_fails_it() -> None:
    space = KeySpace(prefix="m/abc/", suffix="@tp0of2", tag=".mamba~d1")
    hashes = ["a" * 64, "b", "c" * MAX_PAGE_KEY_CHARS]
    assert (
        space.keys(hashes)
        == [space.key(h) for h in hashes]
        == ["m/abc/" + h + ".mamba~d1@tp0of2" for h in hashes]
    )
    assert space.keys([]) == []
    for bad in ("", "x" * (MAX_PAGE_KEY_CHARS + 1), b"bytes", 7, None):
        with pytest.raises(ValueError, match="page key must be a non-empty string"):
            space.keys(["ok", bad])  # type: ignore[list-item]


def test_the_tenant_reader_names_every_key_as_tenant_of_key_does() -> None:
    """The reader remembers the last prefix it parsed: keys of other models, digests and tenants,
    interleaved, a prefix that is another's start, and keys without two slashes."""
    read = tenant_reader()
    keys = [
        "m/d/h1", "m/d/h2", "m/d~t1/h3", "m/d~t1/h4", "m/d/h5", "m2/d~t2/h6", "m/d~t10/h7",
        "m/d~t1/h8", "nokey", "a/b", "\0/\0/x", "m/d~/h9", "m/dd/h10", "m/d~t1/sub/dir~x/h11", "",
    ]  # fmt: skip
    for _ in range(2):
        assert [read(k) for k in keys] == [tenant_of_key(k) for k in keys]
        keys.reverse()
    # a batch at a time (``many``): one call's keys, mixed batches, batches led by a key without
    # a prefix, and the batches of every window of the list
    batches = [keys, keys[:2], keys[2:4], ["m/d~t1/a", "m/d/b"], ["nokey", "m/d/x"], ["a/b", "a/b/c"], []]
    batches += [keys[i : i + w] for w in (2, 3, 5) for i in range(len(keys) - w + 1)]
    for batch in batches:
        assert read.many(batch) == [tenant_of_key(k) for k in batch]
        assert tenant_reader().many(batch) == [tenant_of_key(k) for k in batch]
