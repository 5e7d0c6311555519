"""Does a call release the GIL? Count what another Python thread does while it runs."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable


def progress_during(call: Callable[[], object], attempts: int = 20) -> int:
    """Loops another Python thread made while ``call()`` ran in this one.

    The switch interval is raised for the measurement, so this thread never gives the GIL up on
    its own between the two readings of the counter: the count is 0 unless ``call`` released the
    GIL. The spinner hands the GIL back (``time.sleep(0)``) every 100 loops. A short call may end
    before the OS wakes the spinner on a loaded machine, so the call is repeated (up to
    ``attempts`` times) until the spinner moved: a call that never releases the GIL stays at 0.
    """
    count = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1
            if count[0] % 100 == 0:
                time.sleep(0)

    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    thread = threading.Thread(target=spin)
    try:
        thread.start()
        while count[0] == 0:
            stop.wait(0.001)  # lets the spinner start
        moved = 0
        for _ in range(attempts):
            before = count[0]
            call()
            moved = count[0] - before
            if moved:
                break
        return moved
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old)
