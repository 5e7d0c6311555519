"""Tooling beside the product, installed as ``hicache_mooncake.tools``: benchmarks (``bench``), the
trace replay (``replay``), the demos (``demo``) and the SGLang harness.

The harness builds SGLang's real host pools on CPU for the demo, the benchmarks and the tests.

Dependencies point one way: tools import the product; nothing of the product imports tools (the
CLI's ``bench``, ``replay``, ``demo`` and ``demo-share`` commands are thin entry points that do;
``tests/unit/test_tools_apart.py`` checks it).
"""
