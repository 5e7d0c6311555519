"""``hicache-mooncake demo-share``: two TP sizes share a prefix through one host cache, with KV events.

A TP=1 "prefill" instance and a TP=2 "decode" pair (two ranks) of one MHA model (4 KV heads), each
rank a backend made by SGLang's ``StorageBackendFactory`` (``dynamic``) over SGLang's own MHA host
pool, with ``tp_lcm_size: 2``: a page is stored as 2 head-group objects under a TP-independent
key. All ranks use one host cache service (``tiers.host_cache: on``; the first rank starts it, a
real process), which publishes KV events on a free loopback port; a SUB socket in this process
prints one line per event batch as it arrives.

The TP=1 instance stores a prefix of ``--pages`` pages; each TP=2 rank then finds all of them and
reads exactly its 2 heads of each page, checked byte for byte against what TP=1 wrote. Then the
reverse: the TP=2 ranks each store their heads of a second prefix, and TP=1 finds it and reads
the whole pages (both ranks' heads), checked byte for byte.

Everything it starts is stopped and removed at the end: the host cache service (by the pid in its
lock: SIGTERM, then SIGKILL), its socket, shm and SSD directories. Needs torch and SGLang (the
``sglang`` extra), checked first: exit 2 and one line naming the extra when either is missing.
Exit 1 when a page is missing or differs.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from hicache_mooncake.commands import UsageError
from hicache_mooncake.optional_deps import require

HEADS = 4  # the model's KV heads: 4 on the TP=1 rank, 2 on each TP=2 rank
TP_LCM = 2  # tp_lcm_size: a page is 2 head-group objects, shared by TP=1 and TP=2
PAGE_TOKENS = 16
LAYERS = 3
HEAD_DIM = 32
MAX_SOCKET_PATH = 100  # a Unix socket's path must fit sun_path (108 bytes on Linux)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo-share",
        help="TP=1 and TP=2 instances share a prefix through the host cache; KV events printed",
        description=__doc__,
    )
    parser.add_argument("--pages", type=int, default=16, help="pages in each shared prefix (default 16)")
    parser.set_defaults(func=run, exit_findings="a rank missed a page or read bytes that differ")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def event_summary(seq: int, events: list[Any]) -> str:
    """One line for one batch: consecutive events of one type and medium merged, e.g.
    ``#3 BlockStored 16 blocks medium=CPU_PINNED``."""
    parts: list[list[Any]] = []  # [type, medium, blocks]
    for event in events:
        kind, medium = type(event).__name__, getattr(event, "medium", None)
        blocks = len(getattr(event, "block_hashes", ()) or ())
        if parts and parts[-1][0] == kind and parts[-1][1] == medium:
            parts[-1][2] += blocks
        else:
            parts.append([kind, medium, blocks])
    shown = [
        f"{kind}" + (f" {n} blocks" if n else "") + (f" medium={medium}" if medium else "")
        for kind, medium, n in parts
    ]
    return f"#{seq} " + ", ".join(shown)


class EventPrinter:
    """A SUB socket on ``endpoint`` in a thread of its own, printing one line per batch; counts
    events by type. ``ready()`` waits (bounded) until the socket is connected to a publisher."""

    def __init__(self, endpoint: str, emit: Callable[[str], None] = print) -> None:
        import msgspec
        import zmq

        from hicache_mooncake.kv_events.schema import KVEventBatch

        self._decode = msgspec.msgpack.Decoder(KVEventBatch).decode
        self._zmq = zmq
        self._ctx = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt_string(zmq.SUBSCRIBE, "")
        self._monitor = self._sub.get_monitor_socket(zmq.EVENT_CONNECTED)
        self._sub.connect(endpoint)
        self._emit = emit
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.batches = 0
        self._thread = threading.Thread(target=self._loop, name="demo-share-events", daemon=True)
        self._thread.start()

    def ready(self, timeout_s: float = 10.0) -> bool:
        """True once connected (the subscription then needs a moment to reach the publisher)."""
        ok = bool(self._monitor.poll(int(timeout_s * 1000)))
        if ok:
            time.sleep(0.2)
        return ok

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._sub.poll(100):
                continue
            _topic, seq, payload = self._sub.recv_multipart()
            batch = self._decode(payload)
            with self._lock:
                self.batches += 1
                for event in batch.events:
                    name = type(event).__name__
                    self.counts[name] = self.counts.get(name, 0) + 1
            self._emit(f"  [events] {event_summary(int.from_bytes(seq, 'big'), list(batch.events))}")

    def quiet(self, seconds: float = 0.3, timeout_s: float = 5.0) -> None:
        """Waits until no batch arrived for ``seconds`` (at most ``timeout_s``)."""
        end = time.monotonic() + timeout_s
        last, since = -1, time.monotonic()
        while time.monotonic() < end:
            with self._lock:
                now = self.batches
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= seconds:
                return
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sub.disable_monitor()
        self._monitor.close(linger=0)
        self._sub.close(linger=0)
        self._ctx.term()


def run(args: argparse.Namespace) -> int:
    if args.pages < 1:
        raise UsageError("--pages must be at least 1")
    require("torch", "sglang")
    tmp = Path(tempfile.mkdtemp(prefix="hicache-mooncake-share-"))
    shm = Path(tempfile.mkdtemp(prefix="hicache-mooncake-share-", dir=_shm_parent()))
    run_dir = tmp / "run"
    if len(str(run_dir / "host-cache.sock")) > MAX_SOCKET_PATH:  # a deep $TMPDIR: the socket goes to /tmp
        run_dir = Path(tempfile.mkdtemp(prefix="hicache-share-", dir="/tmp"))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    extra = share_extra(tmp, run_dir, shm, endpoint)
    print(f"host cache: socket/lock/log in {run_dir}, DRAM arena in {shm}, SSD in {tmp / 'ssd'}")
    print(f"KV events: the host cache service publishes on {endpoint}; this process subscribes")
    printer = EventPrinter(endpoint)
    try:
        return _demo(args.pages, extra, printer)
    finally:
        printer.close()
        _stop_service(run_dir)
        for path in (run_dir, tmp, shm):
            shutil.rmtree(path, ignore_errors=True)


def _shm_parent() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def share_extra(tmp: Path, run_dir: Path, shm: Path, endpoint: str) -> dict[str, Any]:
    """The shipped default YAML with the tiers in a private host cache (own socket, shm and SSD
    directories; demo-sized tiers) that publishes KV events on ``endpoint``."""
    from hicache_mooncake.presets import preset_path

    extra: dict[str, Any] = copy.deepcopy(yaml.safe_load(Path(preset_path("default")).read_text()))
    extra.pop("sglang", None)  # the demo sizes its own pools
    tiers = extra.setdefault("tiers", {})
    tiers["host_cache"] = "on"
    tiers.setdefault("dram", {}).update({"capacity": "16MiB", "slab_size": "1MiB"})
    tiers.setdefault("ssd", {}).update(
        {"path": str(tmp / "ssd"), "capacity": "32MiB", "region_size": "1MiB", "min_free": 0}
    )
    extra["host_cache"] = {
        **extra.get("host_cache", {}),
        "dir": str(run_dir),
        "shm_dir": str(shm),
        "start_timeout_s": 30,
        "idle_timeout_s": 60,  # a safety net: the demo stops it itself
    }
    extra["events"] = {"endpoint": endpoint, "flush_interval_s": 0.01}
    # no /metrics or admin endpoints: nothing registered in the user's runtime dir outlives the demo
    extra["metrics"] = {**extra.get("metrics", {}), "port": None}
    extra["admin"] = {**extra.get("admin", {}), "port": None}
    return extra


def _stop_service(run_dir: Path) -> None:
    """Stop the host cache service the first rank started (the pid in its lock): SIGTERM, then SIGKILL."""
    from hicache_mooncake.host_cache.lock import holder_pid

    for lock in sorted(run_dir.glob("*.lock")):
        pid = holder_pid(str(lock))
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and holder_pid(str(lock)) == pid:
                time.sleep(0.05)
            if holder_pid(str(lock)) == pid:
                os.kill(pid, signal.SIGKILL)
            print(f"host cache service pid {pid} stopped")
        except ProcessLookupError:
            pass


def _demo(n: int, extra: dict[str, Any], printer: EventPrinter) -> int:
    warnings.filterwarnings("ignore", message="Only CUDA", category=UserWarning)
    import torch

    ranks: list[tuple[Any, Any]] = []
    try:
        tp1 = _ranks(extra, 1, ranks)
        run_dir = Path(extra["host_cache"]["dir"])
        if not (run_dir / "host-cache.sock").exists():  # the first rank waited start_timeout_s for it
            log = run_dir / "host-cache.log"
            tail = log.read_text()[-2000:] if log.exists() else "(no service log)"
            raise OSError(f"the host cache service did not start (its log {log}):\n{tail}")
        tp2 = _ranks(extra, 2, ranks)
        print(
            f"built: TP=1 'prefill' (1 rank, {HEADS} KV heads) and TP=2 'decode' (2 ranks, {HEADS // 2} heads "
            f"each), MHA page_first, {PAGE_TOKENS} tokens x {LAYERS} layers, tp_lcm_size={TP_LCM}; "
            f"each rank a {type(tp1[0][0]).__name__} made by SGLang's StorageBackendFactory"
        )
        if not printer.ready():
            print("(the events subscriber did not connect within 10 s: events may be missing)")
        failures = 0

        print(f"\n1) TP=1 stores a prefix of {n} pages")
        keys = [f"prefix-a{i:056x}" for i in range(n)]
        backend, host = tp1[0]
        src = host.alloc(n * PAGE_TOKENS)
        _fill(host, src, seed=1)
        stored = sum(backend.batch_set_v1(keys, src))
        print(f"TP=1: stored {stored}/{n} pages ({n * TP_LCM} head-group objects)")
        printer.quiet()
        want = [_by_heads(host, int(src[p * PAGE_TOKENS])) for p in range(n)]
        per = HEADS // 2
        for r, (b, h) in enumerate(tp2):
            found = b.batch_exists(keys)
            dst = h.alloc(n * PAGE_TOKENS)
            read = _leading(b.batch_get_v1(keys, dst))
            same = sum(
                torch.equal(
                    _by_heads(h, int(dst[p * PAGE_TOKENS])), want[p][:, :, :, r * per : (r + 1) * per]
                )
                for p in range(read)
            )
            failures += (found != n) + (read != n) + (same != n)
            print(
                f"TP=2 rank {r}: hits {found}/{n}, read {read}/{n}, heads {r * per}-{(r + 1) * per - 1} "
                f"byte-exact {same}/{n}"
            )

        print(f"\n2) reverse: the TP=2 ranks each store their heads of a prefix of {n} pages")
        keys = [f"prefix-b{i:056x}" for i in range(n)]
        parts = []
        for r, (b, h) in enumerate(tp2):
            idx = h.alloc(n * PAGE_TOKENS)
            _fill(h, idx, seed=10 + r)
            print(f"TP=2 rank {r}: stored {sum(b.batch_set_v1(keys, idx))}/{n} pages (head group {r})")
            printer.quiet()
            parts.append([_by_heads(h, int(idx[p * PAGE_TOKENS])) for p in range(n)])
        found = backend.batch_exists(keys)
        dst = host.alloc(n * PAGE_TOKENS)
        read = _leading(backend.batch_get_v1(keys, dst))
        same = sum(
            torch.equal(
                _by_heads(host, int(dst[p * PAGE_TOKENS])), torch.cat([parts[0][p], parts[1][p]], dim=3)
            )
            for p in range(read)
        )
        failures += (found != n) + (read != n) + (same != n)
        print(f"TP=1: hits {found}/{n}, read {read}/{n}, all {HEADS} heads byte-exact {same}/{n}")

        printer.quiet()
        seen = ", ".join(f"{k} x{v}" for k, v in sorted(printer.counts.items())) or "none"
        print(
            f"\nwhat happened: with tp_lcm_size={TP_LCM} a page's key names its head group "
            f"(<key>@hg<g>of{TP_LCM}), not the rank; TP=1 writes both groups of a page, each TP=2 rank "
            "the group of its heads, so every TP size finds the other's pages and reads its own heads. "
            "The pages live once, in the host cache service, which published what its tiers stored: "
            "one BlockStored block per page (SGLang's block hash of the page, reported with head group 0), "
            "not one per head-group object, so a router counts pages, whatever the TP size of the writer."
        )
        print(f"events seen: {seen}")
        print("result: " + ("OK, every page found and byte-exact both ways" if not failures else "FAILED"))
        return 0 if not failures else 1
    finally:
        for b, _h in ranks:
            b.close()


def _ranks(extra: dict[str, Any], tp_size: int, built: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``tp_size`` ranks, each made by SGLang's factory over its own SGLang MHA host pool and
    registered (as SGLang's controller does); appended to ``built`` as they are made (closed by the caller)."""
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_mooncake.tools.sglang_harness import PoolShape, make_host_pool, make_storage_config

    out = []
    shape = PoolShape(
        page_size=PAGE_TOKENS, layers=LAYERS, heads=HEADS // tp_size, head_dim=HEAD_DIM, device_tokens=512
    )
    for r in range(tp_size):
        host = make_host_pool("page_first", False, shape)
        cfg = make_storage_config(extra, tp_rank=r, tp_size=tp_size, tp_lcm_size=TP_LCM)
        backend = StorageBackendFactory.create_backend("dynamic", cfg, host)
        built.append((backend, host))
        backend.register_mem_pool_host(host)
        out.append((backend, host))
    return out


def _fill(host: Any, idx: Any, seed: int) -> None:
    from hicache_mooncake.tools.sglang_harness import fill_random_pages

    fill_random_pages(host, idx, seed=seed)


def _leading(results: list[bool]) -> int:
    """Pages read before the first miss (SGLang uses a prefix)."""
    n = 0
    for ok in results:
        if not ok:
            break
        n += 1
    return n


def _by_heads(host: Any, first_index: int) -> Any:
    """One page of a ``page_first`` MHA pool as ``[K/V, layer, token, head, dim]`` in raw 16-bit
    words (random bits hold NaNs, so bytes are compared, not values)."""
    import torch

    page = host.get_data_page(first_index, flat=False).permute(0, 2, 1, 3, 4)
    return page.contiguous().view(torch.int16)
