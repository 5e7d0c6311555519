"""The YAML's ``sglang:`` section against the settings SGLang actually runs with, at attach.

The section becomes SGLang's flags only through ``hicache-mooncake launch``; an SGLang started by
hand with ``--hicache-storage-backend-extra-config @FILE`` ignores it (it reads the file for our
keys only). The backend sees what SGLang chose, so it says so: ``log_differences(section,
host_pool)`` logs one warning per key whose value differs, naming the YAML key, both values and
the flag to pass, once per process for each (key, YAML value, SGLang value).

Sources, most authoritative first: the host pool SGLang registers (its ``page_size`` x
``dcp_size`` and ``layout``: what runs, after SGLang's own rewrites), then SGLang's published
server arguments (``sglang.srt.runtime_context.get_server_args()``; absent in a harness, then only
the pool is compared). A value SGLang does not expose is not compared. Never raises.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from hicache_mooncake.config.sglang_section import GB, SglangSection, flag_of

log = logging.getLogger(__name__)
_reported: set[tuple[str, str, str]] = set()
_lock = threading.Lock()


def actual_settings(host_pool: Any, server_args: Any | None) -> dict[str, Any]:
    """SGLang's value of each ``sglang:`` key it exposes (pool first, then server arguments)."""
    out: dict[str, Any] = {}
    if server_args is not None:
        for name in SglangSection.model_fields:
            value = getattr(server_args, name, None)
            if value is not None:
                out[name] = value
    if host_pool is not None:
        page_size = getattr(host_pool, "page_size", None)
        if isinstance(page_size, int):
            out["page_size"] = page_size * int(getattr(host_pool, "dcp_size", 1) or 1)
        layout = getattr(host_pool, "layout", None)
        if isinstance(layout, str):
            out["hicache_mem_layout"] = layout
    return out


def differences(section: SglangSection, actual: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, YAML value, SGLang value) for every key the YAML sets and SGLang runs otherwise."""
    out: list[tuple[str, str, str]] = []
    for name in SglangSection.model_fields:
        wanted = getattr(section, name)
        if wanted is None or name not in actual:
            continue
        if name == "hicache_size":
            wanted = wanted // GB  # SGLang's flag and field are in GB
        got = actual[name]
        same = abs(float(wanted) - float(got)) < 1e-9 if isinstance(wanted, float) else wanted == got
        if not same:
            out.append((name, str(wanted), str(got)))
    return out


def published_server_args() -> Any | None:
    """SGLang's server arguments of this process, when SGLang published them."""
    try:
        from sglang.srt.runtime_context import get_server_args

        return get_server_args()
    except Exception:
        return None


def log_differences(
    section: SglangSection | None, host_pool: Any, server_args: Any | None = None
) -> list[str]:
    """Log (once per process each) and return the messages for the keys SGLang runs otherwise."""
    if section is None:
        return []
    try:
        actual = actual_settings(
            host_pool, server_args if server_args is not None else published_server_args()
        )
        found = differences(section, actual)
    except Exception as exc:  # a check must never fail the attach
        log.debug("sglang: settings not compared: %s", exc)
        return []
    messages: list[str] = []
    for key, wanted, got in found:
        message = (
            f"sglang.{key}: the YAML says {wanted} but SGLang runs with {got}; the sglang: section applies "
            f"only through `hicache-mooncake launch` (or pass {flag_of(key)} {wanted} to SGLang)"
        )
        messages.append(message)
        with _lock:
            if (key, wanted, got) in _reported:
                continue
            _reported.add((key, wanted, got))
        log.warning(
            "hicache-mooncake: %s", message, extra={"log_cause": f"sglang.{key}"}
        )  # one cause per key
    return messages
