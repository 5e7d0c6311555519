"""The backend at attach, with SGLang's real factory and host pools: the YAML's ``sglang:`` section
against what SGLang runs (an SGLang started without ``hicache-mooncake launch`` ignores that
section: each difference is logged once, naming the key and the flag), and this host's checks of
``config validate`` (a bad SSD directory fails the attach with its key, before anything is built)."""

from __future__ import annotations

import pytest
from sglang_helpers import SMALL, make_backend, small_extra

from hicache_mooncake.config import ConfigError
from hicache_mooncake.sglang_adapter import settings_check as sglang_settings_check

pytestmark = pytest.mark.sglang


@pytest.fixture(autouse=True)
def _fresh_process_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each difference is logged once per process: earlier tests of the session may have attached
    with the same difference, so each test here starts as a new process would."""
    monkeypatch.setattr(sglang_settings_check, "_reported", set())


def settings_lines(printed_lines) -> list[str]:
    return printed_lines.matching("SGLang runs with")


def test_a_page_size_and_layout_sglang_does_not_run_are_logged_once_each(printed_lines):
    """Before: with the README's plain SGLang launch line page_size: 64 and the layout silently did
    not apply (the backend never looked)."""
    extra = small_extra()
    extra["sglang"] = {"page_size": 64, "hicache_mem_layout": "page_first_direct", "hicache_ratio": 2.0}
    backend, _host = make_backend("page_first", extra=extra)
    backend.close()
    lines = settings_lines(printed_lines)
    assert len(lines) == 2, lines
    page, layout = sorted(lines, key=lambda line: "page_size" not in line)
    assert f"sglang.page_size: the YAML says 64 but SGLang runs with {SMALL.page_size}" in page
    assert "--page-size 64" in page and "hicache-mooncake launch" in page
    assert (
        "sglang.hicache_mem_layout: the YAML says page_first_direct but SGLang runs with page_first" in layout
    )
    backend, _host = make_backend("page_first", extra=extra)  # a second attach (same process): no repeat
    backend.close()
    assert len(settings_lines(printed_lines)) == 2


def test_a_section_that_matches_what_sglang_runs_logs_nothing(printed_lines):
    extra = small_extra()
    extra["sglang"] = {"page_size": SMALL.page_size, "hicache_mem_layout": "layer_first"}
    backend, _host = make_backend("layer_first", extra=extra)
    backend.close()
    assert settings_lines(printed_lines) == []


def test_a_relative_ssd_path_fails_the_attach_naming_the_key(tmp_path):
    extra = small_extra(
        ssd={"enabled": True, "path": "relative/ssd", "capacity": "8MiB", "region_size": "1MiB"}
    )
    with pytest.raises(ConfigError, match=r"tiers\.ssd\.path: 'relative/ssd' is relative"):
        make_backend(extra=extra)


def test_an_ssd_path_that_cannot_be_created_fails_the_attach_naming_the_key():
    extra = small_extra(
        ssd={"enabled": True, "path": "/proc/nope", "capacity": "8MiB", "region_size": "1MiB"}
    )
    with pytest.raises(
        ConfigError, match=r"tiers\.ssd\.path: '/proc/nope' does not exist and cannot be created"
    ):
        make_backend(extra=extra)
