"""KV events for routers: what the tiers store and drop, published in SGLang's own KV event format.

``schema``: the events; ``block_ids``: the block hashes SGLang publishes for the same pages;
``publisher``: a ZMQ PUB socket fed by a bounded queue; ``subscriber``: prints a stream of them.
"""
