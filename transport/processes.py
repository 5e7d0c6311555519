"""Whether a process still lives, as this host's kernel says (Linux).

``pid_alive`` is True unless the pid is certainly dead here: no such process, or a zombie (it has
exited; only its parent's ``wait`` is missing, and it holds no memory, files or locks any more).
Pids <= 0 count as alive (they name process groups: never signal them), and so does a process we
may not signal (``EPERM``: it exists) or whose state cannot be read.
"""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True unless ``pid`` is certainly dead here (gone, or a zombie); never raises."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[-1].split()[0]
    except FileNotFoundError:  # exited (and was reaped) since the signal
        return False
    except (OSError, IndexError):
        return True
    return state != b"Z"
