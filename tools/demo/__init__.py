"""The demos behind ``hicache-mooncake demo`` (``demo``: one backend on SGLang's host pool, its
tiers and misses explained by ``report``) and ``hicache-mooncake demo-share`` (``share``: two
instances share a prefix through the host cache, KV events printed)."""
