"""Tooling beside the product, installed as ``hicache_mooncake.tools``: benchmarks (``bench``), the
trace replay (``replay``), the demos (``demo``) and the SGLang harness (real SGLang host pools built
on CPU for the demo, benchmarks and tests).

Dependencies point one way: tools import the product; nothing of the product imports tools (the
CLI's ``bench``, ``replay``, ``demo`` and ``demo-share`` commands are thin entry points that do;
``tests/unit/test_tools_apart.py`` checks it).
"""
