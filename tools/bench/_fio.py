"""fio as the disk's ceiling for ``bench ssd`` (underscore: a helper, not a ``bench`` target).

The ceiling is fio at its best, not at one arbitrary setting:

* **buffers on huge pages** (``--iomem=shmhuge``): with ordinary 4 KiB pages a large O_DIRECT
  request reaches a virtual disk as many short segments (``max_segments`` of them at most) and
  runs at about half speed; 2 MiB pages give it long segments. shmhuge needs hugetlb pages:
  reserved ones (``vm.nr_hugepages``) or ones the kernel may allocate on demand
  (``vm.nr_overcommit_hugepages``). :class:`HugePages` checks, and with ``--hugepages`` (root)
  raises ``vm.nr_overcommit_hugepages`` for the run and restores it afterwards. Without huge pages
  fio runs on ordinary memory and the result says so (``iomem``: ``malloc``, with the reason);
* **the best of several configurations**: 1 and 4 jobs x I/O depth 16 and 32, and 4 jobs x depth
  1 (``FIO_CONFIGS``), each job on its own quarter of one file; the winning configuration is
  reported with its figure. Depth 1 is there because more in flight is not always faster: on the
  project's VM (2026-12-04) four jobs of one 8 MiB read each read 2.87-2.89 GB/s where one job x
  depth 32 read 2.60-2.62 and the four deep configurations less.

Writes always go to a fresh file (block allocation included, as the SSD tier's fresh regions
have it); reads read the last file written, page cache dropped first when asked.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
from dataclasses import dataclass
from typing import Any

FIO_ENGINES = ("io_uring", "libaio", "psync")
FIO_CONFIGS = ((1, 16), (1, 32), (4, 1), (4, 16), (4, 32))  # (jobs, iodepth)
HUGE_PAGE = 2 << 20
_OVERCOMMIT = "/proc/sys/vm/nr_overcommit_hugepages"


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(":")
                fields = rest.split()
                if fields:
                    out[name] = int(fields[0])
    except OSError:
        pass
    return out


class HugePages:
    """Whether fio can get ``need`` bytes of hugetlb pages; with ``setup`` (root), raises
    ``vm.nr_overcommit_hugepages`` so it can (pages are allocated only while fio holds them) and
    :meth:`restore` puts the old value back."""

    def __init__(self, need: int, setup: bool) -> None:
        self.need_pages = -(-need // HUGE_PAGE) + 8
        self.old_overcommit: int | None = None
        self.reason = ""
        self.ok = self._check()
        if not self.ok and setup:
            self._raise_overcommit()
            self.ok = self._check()

    @staticmethod
    def _overcommit() -> int:
        try:
            with open(_OVERCOMMIT, encoding="ascii") as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return 0

    def _check(self) -> bool:
        info = _meminfo()
        if info.get("Hugepagesize", 0) * 1024 != HUGE_PAGE:
            self.reason = "no 2 MiB hugetlb pages on this kernel"
            return False
        free = info.get("HugePages_Free", 0) - info.get("HugePages_Rsvd", 0)
        surplus_room = self._overcommit() - info.get("HugePages_Surp", 0)
        if free + max(0, surplus_room) >= self.need_pages:
            self.reason = ""
            return True
        self.reason = (
            f"fio needs {self.need_pages} hugetlb pages of 2 MiB: {free} free, {max(0, surplus_room)} more "
            "allowed on demand (vm.nr_hugepages / vm.nr_overcommit_hugepages; --hugepages, as root, "
            "allows them for the run)"
        )
        return False

    def _raise_overcommit(self) -> None:
        old = self._overcommit()
        try:
            with open(_OVERCOMMIT, "w", encoding="ascii") as f:
                f.write(f"{old + self.need_pages}\n")
        except OSError as e:
            self.reason += f"; raising vm.nr_overcommit_hugepages failed: {e.strerror}"
            return
        self.old_overcommit = old

    def restore(self) -> None:
        if self.old_overcommit is None:
            return
        try:
            with open(_OVERCOMMIT, "w", encoding="ascii") as f:
                f.write(f"{self.old_overcommit}\n")
        except OSError:
            pass
        self.old_overcommit = None


@dataclass(frozen=True)
class FioConfig:
    jobs: int
    iodepth: int

    @property
    def label(self) -> str:
        return f"{self.jobs} job{'s' if self.jobs > 1 else ''} x depth {self.iodepth}"

    def as_dict(self) -> dict[str, int]:
        return {"numjobs": self.jobs, "iodepth": self.iodepth}


CONFIGS = tuple(FioConfig(j, d) for j, d in FIO_CONFIGS)


class Fio:
    """Runs fio jobs; the first engine of ``FIO_ENGINES`` that works is kept for the whole run,
    and the buffers stay on ``iomem`` unless fio cannot get them (then ``malloc``, reason kept)."""

    def __init__(self, iomem: str = "shmhuge", iomem_reason: str = "") -> None:
        self.engine: str | None = None
        self.iomem = iomem
        self.iomem_reason = iomem_reason
        self.tried: dict[str, str] = {}

    def run(self, path: str, rw: str, bs: int, size: int, cfg: FioConfig) -> dict[str, Any]:
        engines = [self.engine] if self.engine else list(FIO_ENGINES)
        last = ""
        for eng in engines:
            assert eng is not None
            try:
                out = self._run_iomem(path, rw, bs, size, eng, cfg)
            except RuntimeError as e:
                self.tried[eng] = str(e)[-300:]
                last = str(e)
                continue
            self.engine = eng
            return out
        raise RuntimeError(f"fio failed with every engine: {last}")

    def _run_iomem(
        self, path: str, rw: str, bs: int, size: int, engine: str, cfg: FioConfig
    ) -> dict[str, Any]:
        try:
            return self._run_once(path, rw, bs, size, engine, cfg, self.iomem)
        except RuntimeError as e:
            if self.iomem == "malloc" or "rc=" not in str(e):
                raise
            # huge pages promised but not obtained (e.g. taken meanwhile): ordinary memory, said so
            self.iomem_reason = f"fio --iomem={self.iomem} failed, fell back to malloc: {str(e)[-200:]}"
            self.iomem = "malloc"
            return self._run_once(path, rw, bs, size, engine, cfg, self.iomem)

    @staticmethod
    def _run_once(
        path: str, rw: str, bs: int, size: int, engine: str, cfg: FioConfig, iomem: str
    ) -> dict[str, Any]:
        per_job = max(bs, size // cfg.jobs // bs * bs)  # a tiny total still gives every job one block
        cmd = [
            "fio", "--name=hicache-bench", f"--filename={path}", f"--rw={rw}", f"--bs={bs}",
            f"--size={per_job}", f"--offset_increment={per_job}", f"--numjobs={cfg.jobs}",
            f"--ioengine={engine}", f"--iodepth={cfg.iodepth}", "--direct=1", f"--iomem={iomem}",
            "--thread=0", "--group_reporting", "--output-format=json",
        ]  # fmt: skip
        if rw == "write":
            cmd.append("--fallocate=none")
        c0 = _cpu_children()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        cpu = _cpu_children() - c0
        if proc.returncode != 0:
            raise RuntimeError(
                f"fio {engine} rc={proc.returncode}: {proc.stderr.strip() or proc.stdout[-300:]}"
            )
        text = proc.stdout
        data = json.loads(text[text.find("{") :])  # fio may print warnings before the JSON
        job = data["jobs"][0]
        if job.get("error"):
            raise RuntimeError(f"fio {engine} job error {job['error']}")
        side = job["read" if rw == "read" else "write"]
        bw = float(side["bw_bytes"])
        if bw <= 0:
            raise RuntimeError(f"fio {engine}: no bandwidth reported")
        io_bytes = float(side.get("io_bytes") or per_job * cfg.jobs)
        # fio's own CPU accounting of its jobs (percent of the jobs' summed runtime): the I/O
        # itself, without the process start and the buffer allocation the rusage figure includes
        io_cpu = (
            (float(job.get("usr_cpu", 0)) + float(job.get("sys_cpu", 0))) / 100 * job["job_runtime"] / 1e3
        )
        return {
            "gbps": bw / 1e9,
            "cpu_s_per_gb": io_cpu / (io_bytes / 1e9),
            "process_cpu_s_per_gb": cpu / (io_bytes / 1e9),
            "engine": engine,
            "iomem": iomem,
            **cfg.as_dict(),
        }

    def best(
        self, path: str, bs: int, size: int, before_read: Any, configs: tuple[FioConfig, ...] = CONFIGS
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Every configuration writes a fresh ``path`` (on an idle disk: the previous file's trims
        done), then every configuration reads the last file (``before_read()`` first: the page
        cache drop). Returns the best write and the best
        read, each with ``config`` (its label) and ``all`` (GB/s per configuration)."""
        from hicache_mooncake.tools.bench._disk import wait_disk_idle

        writes: list[dict[str, Any]] = []
        for cfg in configs:
            if os.path.exists(path):
                os.unlink(path)
                wait_disk_idle(os.path.dirname(path) or ".")  # its trims land before the next run
            writes.append(self.run(path, "write", bs, size, cfg))
        reads: list[dict[str, Any]] = []
        for cfg in configs:
            before_read()
            reads.append(self.run(path, "read", bs, size, cfg))
        return _best_of(writes), _best_of(reads)

    def best_overwrite(
        self, path: str, bs: int, size: int, configs: tuple[FioConfig, ...] = CONFIGS
    ) -> dict[str, Any]:
        """Every configuration writes over the existing ``path`` (its blocks allocated and
        written: no allocation, no extent conversion, no journal work, what a cache whose regions
        have all been used once does); the best, as :meth:`best` reports it."""
        return _best_of([self.run(path, "write", bs, size, cfg) for cfg in configs])


def _best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest run, with ``config`` (its label) and ``all`` (GB/s per configuration)."""
    top = max(runs, key=lambda r: r["gbps"])
    return {
        **top,
        "config": FioConfig(top["numjobs"], top["iodepth"]).label,
        "all": {FioConfig(r["numjobs"], r["iodepth"]).label: round(r["gbps"], 3) for r in runs},
    }


def max_buffer_bytes(bs: int, configs: tuple[FioConfig, ...] = CONFIGS) -> int:
    """The most buffer memory one fio run of ``configs`` at block size ``bs`` holds."""
    return max(c.jobs * c.iodepth * bs for c in configs)
