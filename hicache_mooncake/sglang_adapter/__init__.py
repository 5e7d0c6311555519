"""What speaks SGLang's interface besides the backend's v1 calls (``backend.py``): the adapters
between SGLang's objects and the store.

``compat``: which SGLang we run under; ``host_pools``: which bytes a page of a host pool is;
``host_pool_views``: zero-copy views of them; ``hybrid``: the v2 calls of hybrid models (with
``hit_policy``); ``cross_tp``: head groups across TP sizes; ``settings_check``: SGLang's running
settings against the YAML.
"""
