"""Stand-in for rdma-core's pyverbs, for the tests only (see ../README.md)."""

__version__ = "sim"
