"""What a thread running Python loses to the storage threads beside it, from the kernel's own
per-thread accounting (the measuring part of ``bench gil``; underscore: a helper, not a target).

A pure-Python thread (``BusyLoop``, standing in for SGLang's scheduler thread) is always
runnable: over a window of wall time it is either on a CPU (``schedstat`` field 1: run time), or
waiting in a CPU's run queue for a core (field 2: another process or thread holds the core, which
is the machine's load, not the GIL), or blocked, and the only thing it ever blocks on is the GIL.
So ``gil_wait = wall - run - runqueue_wait``, and the figure (``gil_wait_share``) is its share of
the time the thread was not waiting for a core (``run + gil_wait``): robust on a shared VM, where
other processes keep the thread queued for a core part of the time (``cpu_queue_share`` of the
wall time): that time is neither counted as GIL wait nor lets a busy machine hide it (on an idle
machine both denominators are the wall time). It reads ``/proc/self/task/<tid>/schedstat`` (Linux; present
with ``CONFIG_SCHED_INFO``, as on every distribution kernel); its absence is an error naming the
file, never a silent zero.

``run_workers`` drives one backup and N prefetch threads of a ``Workers`` (the storage calls of
one backend, made the way SGLang's cache controller makes them) for a fixed number of batches
each, and ``measure_leg`` runs: the busy loop alone, the workers alone, then both together, and
reports each figure with its ratio to alone.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

_CHUNK = 1000  # loop iterations between two updates of the counter (and checks of the stop flag)


def schedstat(tid: int) -> tuple[int, int]:
    """(run ns, run-queue wait ns) of thread ``tid`` of this process."""
    path = f"/proc/self/task/{tid}/schedstat"
    try:
        with open(path, encoding="ascii") as f:
            run, wait, _slices = f.read().split()
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"cannot read the kernel's per-thread accounting {path}: {exc}") from None
    return int(run), int(wait)


class BusyLoop:
    """A thread running a pure-Python loop until ``stop()``; ``sample()`` gives its loop count,
    its schedstat and the wall clock at one instant (from any thread)."""

    def __init__(self) -> None:
        self.loops = 0
        self._stop = False
        self._started = threading.Event()
        self.tid = 0
        self._thread = threading.Thread(target=self._run, name="bench-gil-busy", daemon=True)

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        self._started.set()
        while not self._stop:
            for _ in range(_CHUNK):
                pass
            self.loops += _CHUNK

    def __enter__(self) -> BusyLoop:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop = True
        self._thread.join(10)

    def sample(self) -> tuple[float, int, int, int]:
        """(wall seconds, loops, run ns, run-queue wait ns), now."""
        run, wait = schedstat(self.tid)
        return time.perf_counter(), self.loops, run, wait


def busy_figures(before: tuple[float, int, int, int], after: tuple[float, int, int, int]) -> dict[str, float]:
    """The busy loop's figures between two samples."""
    wall = after[0] - before[0]
    run = (after[2] - before[2]) / 1e9
    queued = (after[3] - before[3]) / 1e9
    gil_wait = max(0.0, wall - run - queued)
    return {
        "busy_loops_per_s": (after[1] - before[1]) / wall if wall > 0 else 0.0,
        "gil_wait_share": gil_wait / (run + gil_wait) if run + gil_wait > 0 else 0.0,
        "cpu_queue_share": queued / wall if wall > 0 else 0.0,
        "busy_wall_s": wall,
        "gil_wait_s": gil_wait,
    }


class Workers(Protocol):
    """The storage calls of one backend, made as SGLang's cache controller makes them."""

    page_bytes: int
    batch_pages: int

    def backup(self, n: int) -> int:
        """Set batch ``n`` of new pages (never set before); returns the pages stored."""
        ...

    def prefetch(self, thread: int, n: int) -> int:
        """Get batch ``n`` (modulo the stored batches) of the stored pages into thread ``thread``'s
        own region; returns the pages served."""
        ...


@dataclass
class WorkersRun:
    seconds: float
    bytes: int
    failed_sets: int
    missed_gets: int
    thread_seconds: dict[str, float]

    @property
    def failed_pages(self) -> int:
        return self.failed_sets + self.missed_gets

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds else 0.0


def run_workers(workers: Workers, first_backup: int, batches: int, prefetch_threads: int = 2) -> WorkersRun:
    """One backup thread (batches ``first_backup`` .. + ``batches``) and ``prefetch_threads``
    prefetch threads (``batches`` each), started together; the window ends when the last is done.
    An exception in a thread is raised here, after all have stopped."""
    done: dict[str, tuple[float, int, int]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(prefetch_threads + 2)

    def loop(name: str, call: Any) -> None:
        ok = calls = 0
        try:
            start.wait(30)
            t0 = time.perf_counter()
            for i in range(batches):
                ok += call(i)
                calls += 1
            done[name] = (time.perf_counter() - t0, ok, calls)
        except BaseException as exc:  # reported to the caller below
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=("backup", lambda i: workers.backup(first_backup + i)))]
    for t in range(prefetch_threads):
        threads.append(
            threading.Thread(target=loop, args=(f"prefetch{t}", lambda i, t=t: workers.prefetch(t, i)))
        )
    for th in threads:
        th.daemon = True
        th.start()
    start.wait(30)
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    pages = sum(ok for _, ok, _ in done.values())
    per_thread = batches * workers.batch_pages
    backed_up = done["backup"][1]
    return WorkersRun(
        seconds=seconds,
        bytes=pages * workers.page_bytes,
        failed_sets=per_thread - backed_up,
        missed_gets=prefetch_threads * per_thread - (pages - backed_up),
        thread_seconds={name: s for name, (s, _, _) in done.items()},
    )


def measure_leg(workers: Workers, batches: int, busy_alone_s: float, first_backup: int = 0) -> dict[str, Any]:
    """Busy loop alone for ``busy_alone_s``; the workers alone; the workers beside the busy loop.
    Backup batches ``first_backup`` .. ``first_backup + 2 * batches`` are used (new keys in each
    phase)."""
    with BusyLoop() as busy:
        time.sleep(0.05)
        a = busy.sample()
        time.sleep(busy_alone_s)
        alone = busy_figures(a, busy.sample())
    solo = run_workers(workers, first_backup, batches)
    with BusyLoop() as busy:
        time.sleep(0.05)
        a = busy.sample()
        together = run_workers(workers, first_backup + batches, batches)
        beside = busy_figures(a, busy.sample())
    return {
        "gil_wait_share": beside["gil_wait_share"],
        "cpu_queue_share": beside["cpu_queue_share"],
        "busy_loops_per_s": beside["busy_loops_per_s"],
        "busy_loops_per_s_alone": alone["busy_loops_per_s"],
        "busy_ratio_vs_alone": (
            beside["busy_loops_per_s"] / alone["busy_loops_per_s"] if alone["busy_loops_per_s"] else 0.0
        ),
        "gil_wait_share_alone": alone["gil_wait_share"],
        # per GB moved: legs that move more bytes in the same time take the GIL more often, so
        # the share alone favours a slower client
        "gil_wait_ms_per_gb": (
            beside["gil_wait_s"] * 1e3 / (together.gbps * together.seconds) if together.gbps > 0 else 0.0
        ),
        "io_gbps": together.gbps,
        "io_gbps_alone": solo.gbps,
        "io_ratio_vs_alone": together.gbps / solo.gbps if solo.gbps else 0.0,
        "io_seconds": together.seconds,
        "io_seconds_alone": solo.seconds,
        "failed_pages": together.failed_pages + solo.failed_pages,
        "failed_sets": together.failed_sets + solo.failed_sets,
        "missed_gets": together.missed_gets + solo.missed_gets,
    }
