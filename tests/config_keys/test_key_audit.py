"""Issue 8: every documented configuration key is read by the active code path and changes what a
user observes. ``registry.KEY_TESTS`` names, for each key of the README's reference, the test(s)
showing it; this file keeps that registry complete and honest (cheaply: the referenced tests are
found by parsing their files, not run here; CI runs them in their own suites)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from registry import KEY_TESTS

from hicache_mooncake.config.reference import rows

REPO = Path(__file__).resolve().parents[2]


def documented_leaf_keys() -> list[str]:
    return [key for key, default, _doc in rows() if default != "(section)"]


@functools.cache
def functions_in(path: str) -> dict[str, str]:
    """Test function name -> its source (decorators included) in ``path`` (relative to the repo)."""
    text = (REPO / path).read_text(encoding="utf-8")
    lines = text.splitlines()
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found[node.name] = "\n".join(lines[first - 1 : node.end_lineno])
    return found


def split_node_id(node_id: str) -> tuple[str, str]:
    path, _, name = node_id.partition("::")
    return path, name.partition("[")[0]


def test_every_documented_key_has_a_behaviour_test() -> None:
    missing = [key for key in documented_leaf_keys() if not KEY_TESTS.get(key)]
    assert not missing, (
        "documented keys without a test showing they change behaviour (add one and list it in "
        f"tests/config_keys/registry.py): {', '.join(missing)}"
    )


def test_the_registry_names_only_documented_keys() -> None:
    stale = sorted(set(KEY_TESTS) - set(documented_leaf_keys()))
    assert not stale, f"tests/config_keys/registry.py names keys no longer documented: {', '.join(stale)}"


@pytest.mark.parametrize("key", sorted(KEY_TESTS))
def test_each_referenced_test_exists_and_mentions_its_key(key: str) -> None:
    leaf = key.rsplit(".", 1)[-1]
    for node_id in KEY_TESTS[key]:
        path, name = split_node_id(node_id)
        assert (REPO / path).is_file(), f"{key}: {node_id}: no file {path}"
        functions = functions_in(path)
        assert name in functions, f"{key}: {node_id}: {path} has no test function {name}"
        assert leaf in functions[name], f"{key}: {node_id} never mentions {leaf!r}: is it the right test?"


def test_the_audit_notices_a_key_without_a_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard can fail: a key dropped from the registry is reported by name."""
    monkeypatch.delitem(KEY_TESTS, "tiers.ssd.mode")
    with pytest.raises(AssertionError, match=r"tiers\.ssd\.mode"):
        test_every_documented_key_has_a_behaviour_test()
