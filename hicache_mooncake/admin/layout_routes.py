"""``GET /v1/layout``: what this rank stores and how its object keys are made (``layout.py``), the
report SGLang's ``/get_hicache_l3_cache_layout`` gives for its own Mooncake backend only.

An endpoint without an SGLang backend (a store alone) answers the envelope with ``enabled: false``
and its tiers. Read-only, no I/O."""

from __future__ import annotations

from typing import Any

from .routes import AdminContext, route


@route("GET", "/v1/layout")
def layout(ctx: AdminContext, _body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    # imported here: ``layout`` needs SGLang's pool classes (torch), and the CLI imports the route
    # modules with the admin server on a host that may have neither
    from .layout import BACKEND, tiers_of

    if ctx.layout is not None:
        return 200, {**ctx.labels, **ctx.layout()}
    return 200, {
        **ctx.labels,
        "enabled": False,
        "backend": BACKEND,
        "page_size": None,
        "hicache_object_layout": {"pools": []},
        "reason": "this endpoint serves a store without an SGLang backend: no key space",
        "tiers": tiers_of(ctx.store),
    }
