"""``hicache-mooncake demo``: the entry point of the demo in ``hicache_mooncake.tools.demo.demo``
(tooling, kept out of the product's modules; imported when the CLI builds its parser)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    from hicache_mooncake.tools.demo import demo

    demo.register(sub)
