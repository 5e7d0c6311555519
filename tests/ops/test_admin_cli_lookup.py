"""``hicache-mooncake admin lookup`` and ``admin layout`` as an operator meets them, on a backend
made by SGLang's own factory: the command finds the rank through the discovery directory (no
``--url``), prints JSON keyed by endpoint, answers a lookup of the pages SGLang stored with their
tier and the leading run held (a page never stored is ``null``), and prints the layout report with
the object key rule the data path writes."""

from __future__ import annotations

import json

import pytest
from admin_backend_helpers import PS, backend_of, page_hashes, store_pages

from hicache_mooncake.cli import main

pytestmark = pytest.mark.sglang


def test_lookup_and_layout_print_each_ranks_answer_as_json(tmp_path, capsys):
    backend, host = backend_of(tmp_path)
    base = ["admin", "--discovery-dir", str(tmp_path / "disc"), "--token-file", str(tmp_path / "token")]
    try:
        stored = page_hashes(3)
        store_pages(backend, host, stored)
        absent = page_hashes(1, tag="b")

        assert main([*base, "lookup", *stored[:2], *absent, stored[2]]) == 0
        answers = json.loads(capsys.readouterr().out)
        assert list(answers) == [backend.admin.url]
        answer = answers[backend.admin.url]
        assert answer["tiers"] == ["dram", "dram", None, "dram"]
        assert answer["longest_prefix"] == 2 and answer["counts"] == {"dram": 3}

        assert main([*base, "layout"]) == 0
        report = json.loads(capsys.readouterr().out)[backend.admin.url]
        assert report["enabled"] is True and report["page_size"] == PS
        layout = report["hicache_object_layout"]
        (kv,) = layout["pools"]
        built = [layout["key_prefix"] + h + s for h in stored for s in kv["suffixes"]]
        assert backend.store.contains_batch(built) == [True] * 3
    finally:
        backend.close()


def test_a_lookup_without_page_hashes_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["admin", "--discovery-dir", str(tmp_path / "disc"), "lookup"])
    assert exit_.value.code == 2
    assert "HASH" in capsys.readouterr().err
