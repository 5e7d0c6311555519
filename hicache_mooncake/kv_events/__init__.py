"""KV events for routers (issue 47): what the tiers store and drop, in SGLang's own KV event format
(``schema``), keyed by the block hashes SGLang publishes for the same pages (``block_ids``), on a
ZMQ PUB socket fed by a bounded queue (``publisher``); ``subscriber`` prints a stream of them.
"""
