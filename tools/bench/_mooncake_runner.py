"""Mooncake Store side of ``bench remote`` (not a bench target: the leading underscore hides it).

Run by ``bench remote`` as ``unshare -n -- python -m hicache_mooncake.tools.bench._mooncake_runner
bench ...``, i.e. inside a private network namespace, because the master's embedded HTTP
metadata server binds 0.0.0.0:8080 whatever it is told. In that namespace it

1. brings ``lo`` up (``ip link set lo up``) and sets ``MC_TCP_BIND_ADDRESS=127.0.0.1``;
2. starts ``mooncake_master`` (flags of prior-art §9) and waits for its RPC and HTTP ports;
3. starts a *segment holder*: a separate process (``... _mooncake_runner holder``) that mounts a
   DRAM segment and idles, the way our memory node is a separate process holding the arena;
4. sets up a pure client (``global_segment_size=0``, so every object lands in the holder's
   segment and every byte crosses the Transfer Engine's TCP transport on loopback), registers a
   source and a destination buffer and times ``batch_put_from`` / ``batch_get_into`` of the same
   page sizes, total bytes and batch sizes as our side, verifying every page;
5. prints ``MOONCAKE_RESULT {json}`` (or, with ``--serve``, answers page/repeat commands on stdin
   so ``bench remote`` can interleave Mooncake's repeats with ours) and stops the holder and the master by PID
   (both also get ``PR_SET_PDEATHSIG``, so they die if this process is killed; the namespace goes
   with the last of them).

With ``--provider`` (``bench remote --provider mooncake``) step 4 measures two series side by side
instead: the bare client (``MooncakeSeries(parts=2)``) and our remote tier with the ``mooncake``
provider (``TierSeries``: its own client, same pages, parts and batches), repeats interleaved, each
repeat's objects force-removed afterwards, with the process CPU time spent inside each series'
timed calls; one ``MOONCAKE_RESULT`` line carries both.

The measurement helpers (``stamp``/``timed_batches``) are shared with our side in ``remote.py`` so
both are measured the same way: one untimed warm-up pass, then per repeat the sum of the batch calls'
own durations (stamping and verification are outside the timed region), median over repeats.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MiB = 1 << 20
MASTER_RPC_PORT = 50051
METADATA_PORT = 8080
MASTER_FLAGS = [
    "--rpc_address=127.0.0.1",
    f"--rpc_port={MASTER_RPC_PORT}",
    "--enable_http_metadata_server=true",
    f"--http_metadata_server_port={METADATA_PORT}",
    "--metrics_host=127.0.0.1",
    "--default_kv_lease_ttl=5000",
    "--eviction_high_watermark_ratio=0.95",
]
METADATA_URL = f"http://127.0.0.1:{METADATA_PORT}/metadata"
MASTER_ADDR = f"127.0.0.1:{MASTER_RPC_PORT}"
CLIENT_LOCAL_BUFFER = 64 * MiB
_PR_SET_PDEATHSIG = 1
_MODULE = "hicache_mooncake.tools.bench._mooncake_runner"

# ---- measurement helpers shared with remote.py --------------------------------------------------


def stamp(buf: np.ndarray, page: int, tags: Sequence[int]) -> None:
    """Write a distinct 8-byte tag at the start of each page of ``buf`` (page i gets tags[i]), so a
    get that returns another page's bytes fails verification."""
    for j, tag in enumerate(tags):
        buf[j * page : j * page + 8] = np.frombuffer(int(tag).to_bytes(8, "little"), dtype=np.uint8)


def timed_batches(
    n_pages: int,
    per_batch: int,
    page: int,
    repeat: int,
    src: np.ndarray,
    dst: np.ndarray,
    put: Callable[[list[int]], bool],
    get: Callable[[list[int]], bool],
) -> tuple[float, float]:
    """One put pass then one get pass over ``n_pages`` pages in batches of ``per_batch``.

    ``put(indices)`` sends pages ``src[j*page:(j+1)*page]`` under the keys of ``indices``;
    ``get(indices)`` fills ``dst`` likewise. Returns (put seconds, get seconds): the sum of the
    calls' own durations. Every page read back is compared with what was written."""
    put_s = get_s = 0.0
    for i in range(0, n_pages, per_batch):
        idx = list(range(i, min(i + per_batch, n_pages)))
        stamp(src, page, [(repeat << 32) | k for k in idx])
        t0 = time.perf_counter()
        ok = put(idx)
        put_s += time.perf_counter() - t0
        if not ok:
            raise RuntimeError(f"put of pages {idx[0]}..{idx[-1]} failed")
    for i in range(0, n_pages, per_batch):
        idx = list(range(i, min(i + per_batch, n_pages)))
        dst[: len(idx) * page] = 0
        t0 = time.perf_counter()
        ok = get(idx)
        get_s += time.perf_counter() - t0
        if not ok:
            raise RuntimeError(f"get of pages {idx[0]}..{idx[-1]} failed")
        stamp(src, page, [(repeat << 32) | k for k in idx])
        n = len(idx) * page
        if not np.array_equal(dst[:n], src[:n]):
            raise RuntimeError(f"data mismatch in pages {idx[0]}..{idx[-1]}")
    return put_s, get_s


def summarize(total: int, samples: list[tuple[float, float]]) -> dict[str, Any]:
    """GB/s (1e9 B/s) medians over repeats, plus every sample."""
    puts = [total / p / 1e9 for p, _ in samples]
    gets = [total / g / 1e9 for _, g in samples]
    return {
        "put": round(statistics.median(puts), 4),
        "get": round(statistics.median(gets), 4),
        "put_samples": [round(x, 4) for x in puts],
        "get_samples": [round(x, 4) for x in gets],
    }


# ---- processes ---------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the process that started it exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def interfaces() -> list[str]:
    """Network interfaces of this process's namespace (``/proc/self/net/dev``; /sys/class/net
    shows the namespace that mounted sysfs, not ours)."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":", 1)[0].strip() for line in lines if ":" in line)


def lo_bytes() -> int:
    """Bytes received on ``lo`` in this namespace. In the private namespace only the benchmark's
    processes use it, so the delta over a measurement shows the payload really crossed TCP."""
    for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            return int(rest.split()[0])
    return 0


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _store() -> Any:
    from mooncake.store import MooncakeDistributedStore

    return MooncakeDistributedStore()


def _setup(store: Any, segment: int, local_buffer: int) -> None:
    rc = store.setup("127.0.0.1", METADATA_URL, segment, local_buffer, "tcp", "", MASTER_ADDR)
    if rc != 0:
        raise RuntimeError(f"MooncakeDistributedStore.setup(segment={segment}) returned {rc}")


@contextlib.contextmanager
def _started(cmd: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent
        )
    try:
        yield proc
    finally:
        _stop(proc)


# ---- roles -------------------------------------------------------------------------------------


def holder(args: argparse.Namespace) -> int:
    """Mount a ``--segment``-byte segment, write ``--ready``, idle until SIGTERM."""
    stop = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    store = _store()
    _setup(store, args.segment, 16 * MiB)
    Path(args.ready).write_text(str(os.getpid()))
    while not stop:
        time.sleep(0.1)
    with contextlib.suppress(Exception):
        store.close()
    return 0


class MooncakeSeries:
    """One page size against the holder: registered source/destination buffers, an untimed warm-up,
    then ``repeat(r)`` = one timed put pass + get pass of fresh keys (a get's 5 s lease blocks
    removing the previous repeat's objects). ``parts=2`` stores each page as two halves (K and V)
    of ONE object with the multi-buffer calls, as our tier does; ``parts=1`` uses
    ``batch_put_from`` / ``batch_get_into``."""

    def __init__(self, store: Any, page: int, total: int, batch: int, repeats: int, parts: int = 1) -> None:
        self.store, self.page, self.total, self.parts = store, page, total, parts
        self.per_batch = max(1, batch // page)
        self.n_pages = total // page
        nbuf = self.per_batch * page
        self.src = np.frombuffer(np.random.default_rng(page).bytes(nbuf), dtype=np.uint8).copy()
        self.dst = np.zeros(nbuf, dtype=np.uint8)
        self.registered: list[int] = []
        for arr in (self.src, self.dst):
            rc = store.register_buffer(arr.ctypes.data, nbuf)
            if rc != 0:
                raise RuntimeError(f"register_buffer returned {rc}")
            self.registered.append(arr.ctypes.data)
        self.tag = 0
        # Untimed warm-up: touches the holder's segment (first-touch page faults) for every repeat's
        # keys, then removes them (no gets, so no leases hold them), so the timed repeats write into
        # warm memory, as our node's arena is after its own warm-up pass.
        for r in range(repeats):
            self.tag = 1000 + r
            for i in range(0, self.n_pages, self.per_batch):
                if not self._put(list(range(i, min(i + self.per_batch, self.n_pages)))):
                    raise RuntimeError("warm-up put failed")
        store.remove_all()

    def _keys(self, idx: list[int]) -> list[str]:
        return [f"mc-{self.page}-{self.tag}-{k}" for k in idx]

    def _ranges(self, ptr: int, n: int) -> tuple[list[list[int]], list[list[int]]]:
        half = self.page // 2
        starts = [ptr + j * self.page for j in range(n)]
        return [[a, a + half] for a in starts], [[half, self.page - half]] * n

    def _put(self, idx: list[int]) -> bool:
        ptr, page = self.src.ctypes.data, self.page
        if self.parts == 2:
            ptrs, sizes = self._ranges(ptr, len(idx))
            rcs = self.store.batch_put_from_multi_buffers(self._keys(idx), ptrs, sizes)
        else:
            rcs = self.store.batch_put_from(
                self._keys(idx), [ptr + j * page for j in range(len(idx))], [page] * len(idx)
            )
        return all(rc == 0 for rc in rcs)

    def _get(self, idx: list[int]) -> bool:
        ptr, page = self.dst.ctypes.data, self.page
        if self.parts == 2:
            ptrs, sizes = self._ranges(ptr, len(idx))
            got = self.store.batch_get_into_multi_buffers(self._keys(idx), ptrs, sizes)
        else:
            got = self.store.batch_get_into(
                self._keys(idx), [ptr + j * page for j in range(len(idx))], [page] * len(idx)
            )
        return all(n == page for n in got)

    def all_keys(self) -> list[str]:
        return self._keys(list(range(self.n_pages)))

    def repeat(self, r: int) -> tuple[float, float]:
        self.tag = r
        return timed_batches(
            self.n_pages, self.per_batch, self.page, r, self.src, self.dst, self._put, self._get
        )

    def close(self) -> None:
        for ptr in self.registered:
            with contextlib.suppress(Exception):
                self.store.unregister_buffer(ptr)
        self.registered = []


class TierSeries:
    """Our remote tier over Mooncake (``RemoteDramTier`` + the ``mooncake`` provider: deadline guard,
    counters, zero-copy multi-buffer calls from buffers announced with ``register_memory``), doing
    the same puts and gets as ``MooncakeSeries(parts=2)``: each page one object of two parts."""

    def __init__(self, page: int, total: int, batch: int, repeats: int) -> None:
        from hicache_mooncake.tiers.pool_providers.mooncake import MooncakeProvider
        from hicache_mooncake.tiers.pool_providers.mooncake_config import MooncakeConfig
        from hicache_mooncake.tiers.remote_dram_tier import RemoteDramTier

        self.page, self.total = page, total
        self.per_batch = max(1, batch // page)
        self.n_pages = total // page
        nbuf = self.per_batch * page
        self.src = np.frombuffer(np.random.default_rng(page + 1).bytes(nbuf), dtype=np.uint8).copy()
        self.dst = np.zeros(nbuf, dtype=np.uint8)
        cfg = MooncakeConfig(
            master=MASTER_ADDR,
            metadata_server=METADATA_URL,
            local_hostname="127.0.0.1",
            segment_size=0,
            local_buffer_size=CLIENT_LOCAL_BUFFER,
        )
        self.tier = RemoteDramTier(MooncakeProvider(cfg, 60.0), write_through=True, timeout_s=60.0)
        self.tier.register_memory([self.src.data, self.dst.data])
        self.tag = 1000
        for r in range(repeats):  # untimed warm-up, as MooncakeSeries
            self.tag = 1000 + r
            for i in range(0, self.n_pages, self.per_batch):
                if not self._put(list(range(i, min(i + self.per_batch, self.n_pages)))):
                    raise RuntimeError(f"warm-up put through our tier failed: {self.tier.stats()}")

    def _items(self, buf: np.ndarray, idx: list[int]) -> list[tuple[str, list[memoryview], Any]]:
        from hicache_mooncake.tiers.policy import DEFAULT_CONTEXT

        v, pg, half = buf.data, self.page, self.page // 2
        return [
            (
                f"tier-{pg}-{self.tag}-{k}",
                [v[j * pg : j * pg + half], v[j * pg + half : (j + 1) * pg]],
                DEFAULT_CONTEXT,
            )
            for j, k in enumerate(idx)
        ]

    def _put(self, idx: list[int]) -> bool:
        return all(self.tier.put_batch(self._items(self.src, idx)))

    def _get(self, idx: list[int]) -> bool:
        return all(self.tier.get_batch_into(self._items(self.dst, idx)))

    def all_keys(self) -> list[str]:
        return [key for key, _, _ in self._items(self.src, list(range(self.n_pages)))]

    def repeat(self, r: int) -> tuple[float, float]:
        self.tag = r
        return timed_batches(
            self.n_pages, self.per_batch, self.page, r, self.src, self.dst, self._put, self._get
        )

    def close(self) -> None:
        self.tier.close()


class CpuMeter:
    """Process CPU seconds (every thread: ours, Mooncake's transfer threads) spent inside the timed
    calls of one series, put and get apart. Both series run in this one process, one at a time."""

    def __init__(self) -> None:
        self.put_s = self.get_s = 0.0

    def wrap(self, series: Any) -> None:
        put, get = series._put, series._get

        def timed_put(idx: list[int]) -> bool:
            t0 = time.process_time()
            try:
                return bool(put(idx))
            finally:
                self.put_s += time.process_time() - t0

        def timed_get(idx: list[int]) -> bool:
            t0 = time.process_time()
            try:
                return bool(get(idx))
            finally:
                self.get_s += time.process_time() - t0

        series._put, series._get = timed_put, timed_get


def _provider_pages(store: Any, args: argparse.Namespace, info: dict[str, Any]) -> None:
    """Per page size: the bare client and our tier, repeats interleaved (order alternating), each
    repeat's objects force-removed afterwards (untimed) so the holder holds one repeat at a time."""
    for page in [int(s) for s in args.sizes.split(",")]:
        bare = MooncakeSeries(store, page, args.total, args.batch, args.repeats, parts=2)
        ours = TierSeries(page, args.total, args.batch, args.repeats)
        store.remove_all(True)  # the warm-up objects of both
        series: dict[str, Any] = {"mooncake_client": bare, "ours": ours}
        meters = {name: CpuMeter() for name in series}
        for name, s in series.items():
            meters[name].wrap(s)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in series}
        try:
            for r in range(args.repeats):
                for name in list(series) if r % 2 == 0 else list(series)[::-1]:
                    samples[name].append(series[name].repeat(r))
                    store.batch_remove(series[name].all_keys(), True)
            entry: dict[str, Any] = {}
            moved_gb = args.total * args.repeats / 1e9
            for name in series:
                entry[name] = summarize(args.total, samples[name])
                entry[name]["put_cpu_s_per_gb"] = round(meters[name].put_s / moved_gb, 4)
                entry[name]["get_cpu_s_per_gb"] = round(meters[name].get_s / moved_gb, 4)
                entry[name]["pages_per_batch"] = series[name].per_batch
            entry["ours"]["tier_stats"] = ours.tier.stats()
            info["pages"][f"{page // MiB}MiB"] = entry
        finally:
            bare.close()
            ours.close()
    _emit("RESULT", info)


def _emit(kind: str, payload: dict[str, Any]) -> None:
    print(f"MOONCAKE_{kind} {json.dumps(payload)}", flush=True)


def bench(args: argparse.Namespace) -> int:
    try:
        _bench(args)
    except Exception as exc:
        _emit("ERROR", {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


def _serve(store: Any, args: argparse.Namespace, info: dict[str, Any]) -> None:
    """Commands on stdin, one per line, each answered by one ``MOONCAKE_...`` line on stdout:
    ``page P`` (set up page size P: buffers + warm-up) -> OK; ``repeat R`` -> SAMPLE {put_s,
    get_s, lo_bytes}; ``quit``. Lets ``bench remote`` interleave Mooncake's repeats with ours."""
    _emit("READY", info)
    series: MooncakeSeries | None = None
    try:
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "quit":
                break
            if cmd == "page":
                if series is not None:
                    series.close()
                series = MooncakeSeries(store, int(arg), args.total, args.batch, args.repeats)
                _emit("OK", {"page": int(arg), "pages_per_batch": series.per_batch})
            elif cmd == "repeat" and series is not None:
                lo0 = lo_bytes()
                put_s, get_s = series.repeat(int(arg))
                _emit("SAMPLE", {"put_s": put_s, "get_s": get_s, "lo_bytes": lo_bytes() - lo0})
            else:
                raise RuntimeError(f"bad command {line.strip()!r}")
    finally:
        if series is not None:
            series.close()


def _batch(store: Any, args: argparse.Namespace, info: dict[str, Any]) -> None:
    """All page sizes, all repeats, one ``MOONCAKE_RESULT`` line."""
    for page in [int(s) for s in args.sizes.split(",")]:
        series = MooncakeSeries(store, page, args.total, args.batch, args.repeats)
        try:
            lo0 = lo_bytes()
            samples = [series.repeat(r) for r in range(args.repeats)]
            entry = summarize(args.total, samples)
            entry["pages_per_batch"] = series.per_batch
            # timed puts and gets: 2 * repeats * total payload bytes over lo
            entry["lo_bytes_per_payload_byte"] = round(
                (lo_bytes() - lo0) / (2 * args.repeats * args.total), 3
            )
            info["pages"][f"{page // MiB}MiB"] = entry
        finally:
            series.close()
    _emit("RESULT", info)


def _bench(args: argparse.Namespace) -> None:
    n_sizes = len(args.sizes.split(","))
    # Each repeat of each page size uses fresh keys (a get's lease blocks removal for 5 s); keep
    # the segment below the master's 0.95 eviction watermark.
    segment = int(args.total * args.repeats * n_sizes / 0.8) + 64 * MiB
    if args.provider:  # two series, each holding one repeat's objects at a time
        segment = int(4 * args.total) + 64 * MiB
    info: dict[str, Any] = {"pages": {}}
    with running_store(segment, info, args.allow_shared_netns) as store:
        if args.provider:
            _provider_pages(store, args, info)
        else:
            (_serve if args.serve else _batch)(store, args, info)


@contextlib.contextmanager
def running_store(segment: int, info: dict[str, Any], allow_shared_netns: bool = False) -> Iterator[Any]:
    """A master, a segment holder of ``segment`` bytes and a connected pure client (yielded), in
    this private network namespace (refused outside one unless ``allow_shared_netns``); ``info``
    gets the wheel version, the flags, the interfaces and the PIDs. Everything it started is
    stopped by PID on the way out, the client's objects removed first."""
    if not allow_shared_netns:
        ifs = interfaces()
        if ifs != ["lo"]:
            raise RuntimeError(
                f"not in a private network namespace (interfaces {ifs}); the master's HTTP metadata "
                "server would listen on every interface. Run under `unshare -n`."
            )
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)
    import mooncake

    pkg = Path(mooncake.__file__).resolve().parent
    master_bin = pkg / "mooncake_master"
    if not os.access(master_bin, os.X_OK):
        master_bin.chmod(master_bin.stat().st_mode | 0o111)
    env = dict(os.environ, MC_TCP_BIND_ADDRESS="127.0.0.1")
    os.environ["MC_TCP_BIND_ADDRESS"] = "127.0.0.1"
    info.update(
        wheel_version=_wheel_version(),
        master_flags=MASTER_FLAGS,
        holder_segment_bytes=segment,
        client_setup=["127.0.0.1", METADATA_URL, 0, CLIENT_LOCAL_BUFFER, "tcp", "", MASTER_ADDR],
        interfaces=interfaces(),
    )
    with tempfile.TemporaryDirectory(prefix="mc-bench-") as tmp_s:
        tmp = Path(tmp_s)
        master_log, holder_log = tmp / "master.log", tmp / "holder.log"
        try:
            with _started([str(master_bin), *MASTER_FLAGS], master_log, env) as master:
                _wait_port(MASTER_RPC_PORT, master, "mooncake_master (rpc)")
                _wait_port(METADATA_PORT, master, "mooncake_master (http metadata)")
                ready = tmp / "holder.ready"
                cmd = [sys.executable, "-m", _MODULE, "holder"]
                cmd += ["--segment", str(segment), "--ready", str(ready)]
                with _started(cmd, holder_log, env) as hold:
                    deadline = time.monotonic() + 60
                    while not ready.exists():
                        if hold.poll() is not None:
                            raise RuntimeError(f"segment holder exited with code {hold.returncode}")
                        if time.monotonic() > deadline:
                            raise RuntimeError("segment holder not ready within 60 s")
                        time.sleep(0.05)
                    info["pids"] = {"master": master.pid, "holder": hold.pid, "client": os.getpid()}
                    store = _store()
                    _setup(store, 0, CLIENT_LOCAL_BUFFER)
                    try:
                        yield store
                    finally:
                        with contextlib.suppress(Exception):
                            store.remove_all()
                        with contextlib.suppress(Exception):
                            store.close()
        except Exception as exc:
            raise RuntimeError(
                f"{exc}; master log tail: {_tail(master_log)!r}; holder log tail: {_tail(holder_log)!r}"
            ) from exc


def _wheel_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("mooncake-transfer-engine-non-cuda")
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hicache_mooncake.tools.bench._mooncake_runner")
    sub = p.add_subparsers(dest="role", required=True)
    b = sub.add_parser("bench", help="master + holder + client; prints MOONCAKE_RESULT {json}")
    b.add_argument("--sizes", required=True, help="page sizes in bytes, comma separated")
    b.add_argument("--total", type=int, required=True, help="bytes moved per measurement")
    b.add_argument("--batch", type=int, required=True, help="bytes per batched call")
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--serve", action="store_true", help="take page/repeat commands on stdin")
    b.add_argument(
        "--provider", action="store_true", help="our tier over Mooncake next to the bare client (one RESULT)"
    )
    b.add_argument("--allow-shared-netns", action="store_true", help="skip the private-namespace check")
    h = sub.add_parser("holder", help="mount a segment and idle until SIGTERM")
    h.add_argument("--segment", type=int, required=True)
    h.add_argument("--ready", required=True)
    args = p.parse_args(argv)
    return holder(args) if args.role == "holder" else bench(args)


if __name__ == "__main__":
    sys.exit(main())
