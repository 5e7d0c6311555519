"""The demos behind ``hicache-mooncake demo`` and ``hicache-mooncake demo-share``.

``demo``: one backend on SGLang's host pool, its tiers and misses explained by ``report``;
``share``: two instances share a prefix through the host cache, KV events printed."""
