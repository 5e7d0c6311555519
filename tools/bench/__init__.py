"""Benchmarks behind ``hicache-mooncake bench TARGET``; one module per target (see commands/bench.py)."""
