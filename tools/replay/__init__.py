"""Trace replay: Mooncake-format traces, LRU/OPT references, the sim/store driver and plots."""

from .reference import lru_hit_rate, opt_hit_rate
from .sim import ReplayStore, SimTieredStore, drive
from .trace import Request, generate_trace, load_trace, write_trace

__all__ = [
    "ReplayStore",
    "Request",
    "SimTieredStore",
    "drive",
    "generate_trace",
    "load_trace",
    "lru_hit_rate",
    "opt_hit_rate",
    "write_trace",
]
