"""Keys SGLang itself puts into (or takes out of) the storage extra config, read from SGLang's own
source: a key that a new SGLang adds and our schema does not know would make every launch with it
fail (``unknown key``), so it must fail CI first. Our own typos are still refused."""

from __future__ import annotations

import ast
import functools
import importlib.util
import warnings
from pathlib import Path

import pytest

from hicache_mooncake.config import ConfigError, load_backend_config, validate_config
from hicache_mooncake.config.schema import SGLANG_CONSUMED_KEYS, SGLANG_INJECTED_KEYS

# Other backends' own modules (they read or rewrite their private copy of the dict) and the sparse
# attention config, which has its own extra config: not what SGLang hands a storage backend.
_OTHER_CONFIGS = ("mem_cache/storage/", "mem_cache/sparsity/")


def _sglang_srt() -> Path:
    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    assert spec is not None and spec.submodule_search_locations, "sglang is not installed"
    return Path(next(iter(spec.submodule_search_locations))) / "srt"


def _key(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@functools.cache
def sglang_extra_config_keys() -> tuple[set[str], set[str]]:
    """(keys SGLang writes into the storage extra config, keys it pops from it), from its source.

    A storage extra config is a name ending in ``extra_config`` that mentions ``storage`` (SGLang's
    ``storage_extra_config``, ``storage_backend_extra_config``, ``storage_config.extra_config``) or
    any ``*extra_config`` inside a function whose name mentions storage (its parser)."""
    written: set[str] = set()
    popped: set[str] = set()
    root = _sglang_srt()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(_OTHER_CONFIGS):
            continue
        text = path.read_text(encoding="utf-8")
        if "extra_config" not in text:
            continue
        with warnings.catch_warnings():  # SGLang's own invalid escape sequences
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            in_storage_func = "storage" in func.name
            for node in ast.walk(func):
                target: ast.AST | None = None
                keys: list[str | None] = []
                kind = ""
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    target, method = node.func.value, node.func.attr
                    if method in ("setdefault", "pop") and node.args:
                        keys, kind = [_key(node.args[0])], "pop" if method == "pop" else "write"
                    elif method == "update":
                        keys = [kw.arg for kw in node.keywords]
                        keys += [_key(k) for a in node.args if isinstance(a, ast.Dict) for k in a.keys if k]
                        kind = "write"
                elif isinstance(node, ast.Assign | ast.AugAssign):
                    for tgt in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        if isinstance(tgt, ast.Subscript):
                            target, keys, kind = tgt.value, [_key(tgt.slice)], "write"
                if target is None or not kind:
                    continue
                name = ast.unparse(target)
                if not name.endswith("extra_config") or not ("storage" in name or in_storage_func):
                    continue
                found = {k for k in keys if k}
                (popped if kind == "pop" else written).update(found)
    return written, popped


def test_the_scan_finds_what_sglang_0_5_23_does() -> None:
    """The scan itself works: it finds the keys known to be injected and consumed."""
    written, popped = sglang_extra_config_keys()
    assert "file_storage_path" in written  # unified_radix_cache: --file-storage-path
    assert {"prefetch_threshold", "tp_lcm_size"} <= popped


def test_every_key_sglang_injects_is_accepted() -> None:
    written, _ = sglang_extra_config_keys()
    unknown = written - SGLANG_INJECTED_KEYS - SGLANG_CONSUMED_KEYS
    assert not unknown, (
        f"SGLang now writes {sorted(unknown)} into the storage extra config: add them to "
        "SGLANG_INJECTED_KEYS in hicache_mooncake/config/schema.py"
    )
    validate_config(dict.fromkeys(written, "/some/value"))


def test_every_key_sglang_consumes_is_in_the_schema() -> None:
    _, popped = sglang_extra_config_keys()
    assert popped <= SGLANG_CONSUMED_KEYS, (
        f"new SGLang-consumed keys: {sorted(popped - SGLANG_CONSUMED_KEYS)}"
    )


def test_launch_with_file_storage_path_is_accepted_and_typos_are_refused(tmp_path: Path) -> None:
    cfg = load_backend_config({"file_storage_path": str(tmp_path), "tiers": {"dram": {"capacity": "64MiB"}}})
    assert cfg.tiers.dram.capacity == 64 << 20
    with pytest.raises(ConfigError, match="file_storage_pth: unknown key"):
        load_backend_config({"file_storage_pth": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"tiers\.dram\.capacityy: unknown key"):
        load_backend_config({"file_storage_path": "/x", "tiers": {"dram": {"capacityy": 1}}})
