"""``hicache-mooncake demo-share``: the entry point of the demo in ``hicache_mooncake.tools.demo.share``
(tooling, kept out of the product's modules; imported when the CLI builds its parser)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    from hicache_mooncake.tools.demo import share

    share.register(sub)
