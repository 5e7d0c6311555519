"""A thread running Python throughout, as SGLang's scheduler thread does while the cache
controller's threads call the backend: what a call that gives the GIL up competes with.

A thread that gives the GIL up (I/O, a torch call, a numpy loop over more than 500 elements, a
hand-off to another thread) waits up to a switch interval (``sys.getswitchinterval()``, 5 ms by
default) to get it back while such a thread runs. Benchmarks report throughput next to it beside
throughput alone; tests set a long interval so each hand-off is visible as one interval.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


@contextmanager
def busy_python_thread(switch_interval: float | None = None) -> Iterator[None]:
    """Run a pure-Python busy loop on a daemon thread for the duration of the block (and the
    interpreter's switch interval at ``switch_interval`` when given, restored afterwards)."""
    old = sys.getswitchinterval()
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    spinner = threading.Thread(target=spin, name="hicache-bench-busy", daemon=True)
    spinner.start()
    try:
        yield
    finally:
        stop.set()
        spinner.join(10)
        sys.setswitchinterval(old)


def gil_handoffs(fn: Callable[[], T]) -> tuple[int, T]:
    """How many times ``fn()`` gave the GIL up, inside ``busy_python_thread`` with a switch
    interval far longer than ``fn`` takes (each hand-off then costs one interval), and its result."""
    interval = sys.getswitchinterval()
    time.sleep(0)  # give the GIL up and take it back: the busy thread's wait for it starts now
    start = time.perf_counter()
    out = fn()
    return round((time.perf_counter() - start) / interval), out
