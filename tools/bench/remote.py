"""Remote DRAM pool over loopback: NodeClient get/put vs a raw socket baseline and Mooncake Store.

How it measures, its cases and what to read into the figures: docs/benchmarks-notes.md
(``bench remote`` section; ``bench --help`` shows the line above).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes.util
import importlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hicache_mooncake.tools.bench._busy import busy_python_thread
from hicache_mooncake.tools.bench._mooncake_runner import summarize, timed_batches
from hicache_mooncake.tools.results_json import write_json
from hicache_mooncake.transport import ClientOptions, NodeClient, make_engine
from hicache_mooncake.transport.rdma.engine import rdma_unavailable_reason
from hicache_mooncake.transport.rdma.options import RdmaOptions
from hicache_mooncake.transport.sockio import recv_into_exact, send_all

MiB = 1 << 20
MOONCAKE_DIST = "mooncake-transfer-engine-non-cuda"
MOONCAKE_PIN = f"{MOONCAKE_DIST}==0.3.13.post1"  # same pin as requirements/mooncake.txt
RUNNER_MODULE = "hicache_mooncake.tools.bench._mooncake_runner"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="1MiB,8MiB", help="page sizes (MiB units)")
    parser.add_argument("--total-mib", type=int, default=256, help="bytes moved per measurement")
    parser.add_argument("--batch-mib", type=int, default=32, help="bytes per batched call")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (median reported)")
    parser.add_argument("--engines", "--engine", default="tcp,local", help="tcp, local, rdma (comma list)")
    parser.add_argument(
        "--rdma-device", default="", help="RDMA device for the rdma engine (default: the first)"
    )
    parser.add_argument(
        "--provider",
        choices=("nodes", "mooncake"),
        default="nodes",
        help="nodes: our node client vs socket/Mooncake baselines; mooncake: our remote tier over "
        "Mooncake Store next to the bare Mooncake client (see _remote_provider)",
    )
    parser.add_argument(
        "--with-mooncake",
        dest="with_mooncake",
        action="store_true",
        default=True,
        help="compare with Mooncake Store over TE TCP when it is installed (default)",
    )
    parser.add_argument(
        "--no-mooncake", dest="with_mooncake", action="store_false", help="skip the Mooncake comparison"
    )
    parser.add_argument(
        "--pip-install-mooncake",
        action="store_true",
        help=f"pip-install {MOONCAKE_PIN} (--no-deps) into this environment when it is missing",
    )
    parser.add_argument(
        "--apt-install-ibverbs",
        action="store_true",
        help="apt-get install libibverbs1 (root) when it is missing (Mooncake needs it even for TCP)",
    )
    parser.add_argument("--mooncake-spec", default=MOONCAKE_PIN, help="what --pip-install-mooncake installs")
    parser.add_argument("--mooncake-timeout", type=float, default=900, help="seconds for the Mooncake run")


# ---- our side ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_node(tmp: Path, capacity: int, rdma_device: str = "") -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    cfg = tmp / "node.yaml"
    ready = tmp / "node.ready"
    node: dict[str, Any] = {"node_id": "bench", "port": port, "capacity": capacity}
    if rdma_device:
        node["rdma_device"] = rdma_device
    cfg.write_text(yaml.safe_dump({"node": node, "metadata": {"backend": "embedded"}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "hicache_mooncake", "node", "--config", str(cfg), "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, HICACHE_NODE_SECRET="bench"),
    )
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError("memory node did not start")
        time.sleep(0.02)
    return proc, port


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


_RAW_REQUEST = struct.Struct("!BQQ")  # op (1 put, 2 get), bytes, offset into the server's store


def _serve_raw_conn(conn: socket.socket, store: memoryview) -> None:
    """One connection of the raw server: a put's bytes land in ``store`` at the request's offset,
    a get sends them back from there (the bytes that were put, from memory the size of what the
    series stores, as the node serves them; not one reused buffer)."""
    with conn:
        req = bytearray(_RAW_REQUEST.size)
        while True:
            try:
                recv_into_exact(conn, memoryview(req), None)
            except Exception:
                return
            op, n, off = _RAW_REQUEST.unpack(req)
            if off + n > len(store):
                return  # the client sees the connection close, never bytes from elsewhere
            if op == 1:  # put
                recv_into_exact(conn, store[off : off + n], None)
                conn.sendall(b"k")
            else:
                send_all(conn, [store[off : off + n]], None)


def _serve_raw(srv: socket.socket, store_bytes: int, conns: int) -> None:
    """The raw server: one process holding one store, one thread per connection (as the node)."""
    store = memoryview(bytearray(store_bytes))
    threads = []
    for _ in range(conns):
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = threading.Thread(target=_serve_raw_conn, args=(conn, store), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


SOCKET_CONNECTIONS = (1, 2, 4)


class SocketSeries:
    """The same job with no protocol: a server process (like the node: one thread per connection)
    stores every page put at its own place and sends it back on a get, with the same sendmsg /
    recv_into calls, one request per batch, or with ``conns`` connections one request per
    connection, each carrying an equal share of the batch's pages (client threads, like our
    striping). Run by the same harness as ours (:func:`timed_batches`: pages stamped uniquely,
    every page read back verified, untimed), so both sides move the same bytes between the same
    kinds of memory."""

    def __init__(self, page: int, total: int, batch: int, conns: int = 1) -> None:
        self.page, self.total, self.conns = page, total, conns
        self.per_batch = max(1, batch // page)
        self.n_pages = total // page
        nbuf = self.per_batch * page
        srv = socket.create_server(("127.0.0.1", 0))
        port = srv.getsockname()[1]
        ctx = multiprocessing.get_context("fork")
        self.proc = ctx.Process(target=_serve_raw, args=(srv, self.n_pages * page, conns), daemon=True)
        self.proc.start()
        srv.close()
        self.clis = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]
        for cli in self.clis:
            cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.src = np.frombuffer(np.random.default_rng(page).bytes(nbuf), dtype=np.uint8).copy()
        self.dst = np.zeros(nbuf, dtype=np.uint8)
        self._pool = ThreadPoolExecutor(max_workers=conns - 1) if conns > 1 else None
        self.repeat(0)  # untimed warm-up pass (the store's first touch), like ours

    def _stripes(self, n_pages: int) -> list[tuple[int, int]]:
        """(start, end) byte ranges of the batch, one per connection (whole pages)."""
        k = min(self.conns, n_pages)
        bounds = [n_pages * i // k * self.page for i in range(k + 1)]
        return [(bounds[i], bounds[i + 1]) for i in range(k)]

    def _put_stripe(self, cli: socket.socket, at: int, lo: int, hi: int) -> None:
        head = memoryview(_RAW_REQUEST.pack(1, hi - lo, at + lo))
        send_all(cli, [head, memoryview(self.src.data)[lo:hi]], None)
        recv_into_exact(cli, memoryview(bytearray(1)), None)

    def _get_stripe(self, cli: socket.socket, at: int, lo: int, hi: int) -> None:
        send_all(cli, [memoryview(_RAW_REQUEST.pack(2, hi - lo, at + lo))], None)
        recv_into_exact(cli, memoryview(self.dst.data)[lo:hi], None)

    def _batch(self, fn: Any, idx: list[int]) -> bool:
        """Pages ``idx`` (consecutive, as :func:`timed_batches` hands them) at their place in the
        store, split over the connections."""
        if idx != list(range(idx[0], idx[0] + len(idx))):
            raise ValueError("SocketSeries moves runs of consecutive pages")
        at = idx[0] * self.page
        stripes = self._stripes(len(idx))
        futures = [
            self._pool.submit(fn, self.clis[i], at, lo, hi)  # type: ignore[union-attr]
            for i, (lo, hi) in enumerate(stripes[1:], start=1)
        ]
        fn(self.clis[0], at, *stripes[0])
        for f in futures:
            f.result()
        return True

    def repeat(self, r: int) -> tuple[float, float]:
        return timed_batches(
            self.n_pages,
            self.per_batch,
            self.page,
            r,
            self.src,
            self.dst,
            lambda idx: self._batch(self._put_stripe, idx),
            lambda idx: self._batch(self._get_stripe, idx),
        )

    def close(self) -> None:
        for cli in self.clis:
            # shutdown, not only close: a server process forked after this one holds a copy of
            # this socket, and a close alone sends no FIN while a copy is open (its server would
            # wait for a request until the join below gives up)
            with contextlib.suppress(OSError):
                cli.shutdown(socket.SHUT_RDWR)
            cli.close()
        if self._pool is not None:
            self._pool.shutdown()
        self.proc.join(5)
        if self.proc.is_alive() and self.proc.pid is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.join(5)


class NodeSeries:
    """Our ``NodeClient`` (one engine) against the memory node process."""

    def __init__(
        self, port: int, engine: str, page: int, total: int, batch: int, rdma_device: str = ""
    ) -> None:
        eng: Any = engine
        if engine == "rdma":  # registered buffers, as SGLang's host pool is: no bounce copies
            eng = make_engine("rdma", options=RdmaOptions(device=rdma_device))
        self.c = NodeClient("127.0.0.1", port, ClientOptions(timeout_s=30, secret=b"bench"), eng)
        self._own = eng if engine == "rdma" else None
        self.engine, self.page, self.total = engine, page, total
        self.per_batch = max(1, batch // page)
        self.n_pages = total // page
        nbuf = self.per_batch * page
        self.src = np.frombuffer(np.random.default_rng(page).bytes(nbuf), dtype=np.uint8).copy()
        self.dst = np.zeros(nbuf, dtype=np.uint8)
        for buf in (self.src, self.dst):
            self.c.register_memory(memoryview(buf.data))
        # Untimed warm-up pass, puts and gets, as the socket series' (the arena's first touch, and
        # the first bulk transfers each way of each connection, which stall 40-60 ms here for the
        # first batch or two, raw sockets' as ours).
        self.repeat(1000)

    def _items(self, buf: np.ndarray, idx: list[int]) -> list[tuple[str, list[memoryview]]]:
        v, pg = buf.data, self.page
        return [(f"{self.engine}-{pg}-{self.tag}-{k}", [v[j * pg : (j + 1) * pg]]) for j, k in enumerate(idx)]

    def _put(self, idx: list[int]) -> bool:
        return all(self.c.put_batch(self._items(self.src, idx)))

    def _get(self, idx: list[int]) -> bool:
        return all(self.c.get_batch_into(self._items(self.dst, idx)))

    def repeat(self, r: int) -> tuple[float, float]:
        self.tag = r
        out = timed_batches(
            self.n_pages, self.per_batch, self.page, r, self.src, self.dst, self._put, self._get
        )
        self.c.clear()  # untimed: the node holds one repeat at a time
        return out

    def close(self) -> None:
        self.c.close()
        if self._own is not None:
            self._own.close()


# ---- Mooncake side -----------------------------------------------------------------------------


def _run_quiet(cmd: list[str], timeout: float = 600) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, f"{type(exc).__name__}: {exc}"
    return p.returncode, (p.stdout + p.stderr)[-1500:]


def _mooncake_importable() -> tuple[bool, str]:
    """Whether ``mooncake.store`` imports (checked in a child so a broken install cannot hurt us)."""
    rc, out = _run_quiet([sys.executable, "-c", "import mooncake.store"], timeout=120)
    return rc == 0, out.strip()


def _mooncake_installed() -> bool:
    try:
        metadata.version(MOONCAKE_DIST)
    except metadata.PackageNotFoundError:
        return False
    return True


def _have_ibverbs() -> bool:
    return ctypes.util.find_library("ibverbs") is not None


def prepare_mooncake(
    spec: str, steps: list[str], allow_pip: bool = False, allow_apt: bool = False
) -> str | None:
    """Make ``mooncake.store`` importable; with ``allow_apt`` apt-install ``libibverbs1`` and with
    ``allow_pip`` pip-install ``spec`` (``--no-deps``: the store needs none of the wheel's declared
    dependencies) when missing. Returns None when ready, else the exact reason (naming the flag
    that would install what is missing). ``steps`` receives what was done."""
    ok, err = _mooncake_importable()
    if ok:
        steps.append("mooncake.store already importable")
        return None
    steps.append(f"import mooncake.store failed: {err[-300:]}")
    if not _have_ibverbs():
        if not allow_apt:
            return "libibverbs.so.1 is missing: Mooncake skipped (--apt-install-ibverbs installs libibverbs1)"
        apt = shutil.which("apt-get")
        if apt is None:
            return "libibverbs.so.1 is missing and apt-get is not available to install libibverbs1"
        rc, out = _run_quiet([apt, "install", "-y", "libibverbs1"])
        if rc != 0:
            _run_quiet([apt, "update"])
            rc, out = _run_quiet([apt, "install", "-y", "libibverbs1"])
        steps.append(f"apt-get install -y libibverbs1 -> rc {rc}")
        if rc != 0:
            return f"apt-get install -y libibverbs1 failed (rc {rc}): {out[-600:]}"
    if not _mooncake_installed() or not _mooncake_importable()[0]:
        if not allow_pip:
            return (
                f"{MOONCAKE_DIST} is not installed: Mooncake skipped (--pip-install-mooncake installs {spec})"
            )
        rc, out = _run_quiet([sys.executable, "-m", "pip", "install", "--no-deps", spec], timeout=900)
        steps.append(f"pip install --no-deps {spec} -> rc {rc}")
        if rc != 0:
            return f"pip install --no-deps {spec} failed (rc {rc}): {out[-600:]}"
    ok, err = _mooncake_importable()
    if not ok:
        return f"{MOONCAKE_DIST} installed but `import mooncake.store` fails: {err[-600:]}"
    steps.append("mooncake.store importable after setup")
    return None


def runner_command(sizes: list[int], total: int, batch: int, repeats: int) -> list[str]:
    unshare = shutil.which("unshare") or "unshare"
    cmd = [unshare, "-n", "--", sys.executable, "-m", RUNNER_MODULE, "bench", "--serve"]
    cmd += ["--sizes", ",".join(str(s) for s in sizes), "--total", str(total)]
    return cmd + ["--batch", str(batch), "--repeats", str(repeats)]


class MooncakeSession:
    """The Mooncake runner (master + holder + client in a private network namespace) driven
    command by command, so its repeats interleave with ours. Killed by PID after ``timeout``
    seconds in all (its master and holder die with it: PR_SET_PDEATHSIG)."""

    def __init__(self, sizes: list[int], total: int, batch: int, repeats: int, timeout: float) -> None:
        self.cmd = runner_command(sizes, total, batch, repeats)
        self.err = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in close())
        self.lo_bytes = 0
        self.per_batch = 0
        self.timed_out = False
        self.proc = subprocess.Popen(
            self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True, bufsize=1
        )
        self.timer = threading.Timer(timeout, self._kill)
        self.timer.daemon = True
        self.timer.start()
        try:
            self.info = self._expect("READY")
        except Exception:
            self.close()
            raise

    def _kill(self) -> None:
        self.timed_out = True
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    def _expect(self, kind: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            head, _, body = line.partition(" ")
            if head == f"MOONCAKE_{kind}":
                out: dict[str, Any] = json.loads(body)
                return out
            if head == "MOONCAKE_ERROR":
                raise RuntimeError(json.loads(body)["error"])
        rc = self.proc.wait(10)
        self.err.seek(0)
        tail = self.err.read()[-1500:]
        why = "timed out, killed" if self.timed_out else f"exit {rc}"
        raise RuntimeError(f"Mooncake runner gave no {kind} ({why}); stderr tail: {tail!r}")

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the runner is gone; _expect says why

    def page(self, page: int) -> MooncakeSession:
        self._send(f"page {page}")
        self.lo_bytes = 0
        self.per_batch = int(self._expect("OK")["pages_per_batch"])
        return self

    def repeat(self, r: int) -> tuple[float, float]:
        self._send(f"repeat {r}")
        s = self._expect("SAMPLE")
        self.lo_bytes += int(s["lo_bytes"])
        return float(s["put_s"]), float(s["get_s"])

    def close(self) -> None:
        self._send("quit")
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self._kill()
            self.proc.wait(10)
        finally:
            self.timer.cancel()
            self.err.close()


# ---- driver ------------------------------------------------------------------------------------


def _ratio(a: float, b: float | None) -> float | None:
    return round(a / b, 3) if b else None


def run(args: argparse.Namespace) -> int:
    if getattr(args, "provider", "nodes") == "mooncake":
        from hicache_mooncake.tools.bench._remote_provider import run_provider_mooncake

        return run_provider_mooncake(args)
    sizes = [int(s.strip().lower().removesuffix("mib")) * MiB for s in args.sizes.split(",")]
    total = args.total_mib * MiB
    batch = args.batch_mib * MiB
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    rdma: dict[str, Any] = {"requested": "rdma" in engines}
    if "rdma" in engines:
        rdma["reason"] = rdma_unavailable_reason(args.rdma_device)
        if rdma["reason"]:
            print(f"rdma: not measured: {rdma['reason']}")
            engines.remove("rdma")
        else:
            rdma["device"] = args.rdma_device or "(first)"
            rdma["pyverbs"] = importlib.import_module("pyverbs").__file__  # which one: a real rdma-core?
    engines = engines or ["tcp"]
    base = "tcp" if "tcp" in engines else engines[0]
    result: dict[str, Any] = {
        "unit": f"GB/s (1e9 B/s), median of repeats (samples listed); ratios = our {base} / baseline",
        "method": "separate server/node/segment-holder process, loopback TCP; per page size an untimed "
        "warm-up pass, then repeats interleaved across all series (order rotated each repeat); a "
        "repeat's figure = bytes / sum of its batched calls' durations; every page stamped uniquely "
        "and every page read back verified (socket, ours, Mooncake); socket = best of 1/2/4 "
        "connections to a server that keeps every page at its own place",
        "total_bytes": total,
        "batch_bytes": batch,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "rdma": rdma,
        "pages": {},
    }
    mooncake: dict[str, Any] = {"requested": bool(args.with_mooncake), "setup_steps": []}
    reason: str | None = None
    session: MooncakeSession | None = None
    if not args.with_mooncake:
        reason = "disabled by --no-mooncake"
    else:
        reason = prepare_mooncake(
            args.mooncake_spec, mooncake["setup_steps"], args.pip_install_mooncake, args.apt_install_ibverbs
        )
        if reason is not None:
            print(reason, flush=True)
        if reason is None:
            try:
                session = MooncakeSession(sizes, total, batch, args.repeats, args.mooncake_timeout)
                mooncake["run"] = dict(session.info, command=session.cmd)
            except Exception as exc:
                reason = f"Mooncake Store run failed: {exc}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            node_rdma = (args.rdma_device or "auto") if "rdma" in engines else ""
            proc, port = _start_node(Path(tmp), total + 64 * MiB, node_rdma)
            try:
                for page in sizes:
                    entry, reason = _measure_page(
                        page, total, batch, args.repeats, port, engines, session, reason, args.rdma_device
                    )
                    if reason is not None and session is not None:
                        session.close()
                        session = None
                    result["pages"][f"{page // MiB}MiB"] = entry
            finally:
                _stop(proc)
    finally:
        if session is not None:
            session.close()
    mooncake["reason"] = reason
    result["mooncake"] = mooncake
    _ratios_and_print(result, engines, base, reason)
    if args.json_out:
        write_json(args.json_out, result)
    if args.plot_out:
        _plot(result, args.plot_out, engines, base)
    return 0


Series = SocketSeries | NodeSeries | MooncakeSession


def _measure_page(
    page: int,
    total: int,
    batch: int,
    repeats: int,
    port: int,
    engines: list[str],
    session: MooncakeSession | None,
    reason: str | None,
    rdma_device: str = "",
) -> tuple[dict[str, Any], str | None]:
    series: dict[str, Series] = {
        f"socket{n}": SocketSeries(page, total, batch, n) for n in SOCKET_CONNECTIONS
    }
    try:
        for eng in engines:
            series[eng] = NodeSeries(port, eng, page, total, batch, rdma_device)
        if session is not None:
            try:
                series["mooncake"] = session.page(page)
            except Exception as exc:
                reason = f"Mooncake Store run failed: {exc}"
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in series}
        names = list(series)
        for r in range(repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if name not in series:
                    continue
                try:
                    samples[name].append(series[name].repeat(r))
                except Exception as exc:
                    if name != "mooncake":
                        raise
                    reason = f"Mooncake Store run failed: {exc}"
                    del series[name]
        busy = _busy_samples(series, engines, repeats)
        entry: dict[str, Any] = {}
        for name, s in series.items():
            entry[name] = summarize(total, samples[name])
            entry[name]["pages_per_batch"] = s.per_batch
            if name in busy:
                entry[name].update(_busy_figures(total, busy[name], entry[name]))
        # the socket ceiling: the best of 1/2/4 connections, per direction
        by_conns = {n: entry.pop(f"socket{n}") for n in SOCKET_CONNECTIONS}
        best: dict[str, Any] = {"pages_per_batch": by_conns[1]["pages_per_batch"]}
        for op in ("get", "put"):
            n_best = max(SOCKET_CONNECTIONS, key=lambda n: float(by_conns[n][op]))  # noqa: B023
            best[op] = by_conns[n_best][op]
            best[f"{op}_samples"] = by_conns[n_best][f"{op}_samples"]
            best[f"{op}_connections"] = n_best
        best["by_connections"] = {str(n): {"get": v["get"], "put": v["put"]} for n, v in by_conns.items()}
        entry = {"socket": best, **entry}
        if "mooncake" in entry and session is not None:
            # payload bytes of the timed puts and gets vs bytes seen on lo in the private namespace
            entry["mooncake"]["lo_bytes_per_payload_byte"] = round(
                session.lo_bytes / (2 * repeats * total), 3
            )
    finally:
        for name, s in series.items():
            if name != "mooncake":
                s.close()
    return entry, reason


def _busy_samples(
    series: dict[str, Series], engines: list[str], repeats: int
) -> dict[str, list[tuple[float, float]]]:
    """Our engines' repeats again, next to a thread running Python throughout (SGLang's scheduler
    while its cache controller's threads call the backend): every call that gives the GIL up then
    waits up to a switch interval (5 ms) to get it back. At least one repeat, half as many as alone."""
    out: dict[str, list[tuple[float, float]]] = {}
    with busy_python_thread():
        for name in engines:
            if name in series:
                out[name] = [series[name].repeat(repeats + r) for r in range(max(1, repeats // 2))]
    return out


def _busy_figures(total: int, samples: list[tuple[float, float]], alone: dict[str, Any]) -> dict[str, Any]:
    busy = summarize(total, samples)
    return {
        "busy_get": busy["get"],
        "busy_put": busy["put"],
        "busy_get_ratio_vs_alone": _ratio(busy["get"], alone["get"]),
        "busy_put_ratio_vs_alone": _ratio(busy["put"], alone["put"]),
    }


def _ratios_and_print(result: dict[str, Any], engines: list[str], base: str, reason: str | None) -> None:
    for name, entry in result["pages"].items():
        ours, sock, mc = entry[base], entry["socket"], entry.get("mooncake")
        entry["get_ratio_vs_socket"] = _ratio(ours["get"], sock["get"])
        entry["put_ratio_vs_socket"] = _ratio(ours["put"], sock["put"])
        entry["get_ratio_vs_mooncake"] = _ratio(ours["get"], mc["get"]) if mc else None
        entry["put_ratio_vs_mooncake"] = _ratio(ours["put"], mc["put"]) if mc else None
        entry["mooncake_reason"] = None if mc else (reason or "no Mooncake figures for this page size")
        series = ["socket", *engines, *(["mooncake"] if mc else [])]
        print(
            f"{name:>5} pages (GB/s get/put): "
            + " | ".join(f"{s} {entry[s]['get']:.2f}/{entry[s]['put']:.2f}" for s in series)
        )
        vs_mc = (
            f"get {entry['get_ratio_vs_mooncake']:.2f}x put {entry['put_ratio_vs_mooncake']:.2f}x"
            if mc
            else f"n/a ({entry['mooncake_reason']})"
        )
        print(
            f"{name:>5} {base}/socket: get {entry['get_ratio_vs_socket']:.2f} put "
            f"{entry['put_ratio_vs_socket']:.2f} | {base}/mooncake: {vs_mc} | next to a busy Python "
            f"thread: get {ours['busy_get']:.2f} put {ours['busy_put']:.2f} GB/s "
            f"({ours['busy_get_ratio_vs_alone']:.2f}/{ours['busy_put_ratio_vs_alone']:.2f} of alone)"
        )


def replot(result: dict[str, Any], out: str) -> None:
    """The figure from a JSON this target wrote (``bench remote --replot JSON --plot OUT``; either
    kind: the nodes run, or ``--provider mooncake``'s)."""
    if result.get("provider") == "mooncake":
        from hicache_mooncake.tools.bench._remote_provider import plot_provider

        plot_provider(result, out)
        return
    first = next(iter(result["pages"].values()))
    engines = [k for k, v in first.items() if isinstance(v, dict) and k not in ("socket", "mooncake")]
    _plot(result, out, engines, "tcp" if "tcp" in engines else engines[0])


#: How the ``mooncake`` series of this target stores a page (``--provider mooncake`` differs).
MOONCAKE_SERIES = "mooncake (1 buffer/object: batch_put_from, batch_get_into)"


def _plot(result: dict[str, Any], path: str, engines: list[str], base: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hicache_mooncake.tools.bench._plotting import legend_under

    pages = list(result["pages"])
    series = ["socket", *engines]
    if any("mooncake" in result["pages"][pg] for pg in pages):
        series.append("mooncake")
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2), layout="constrained")
    width = 0.8 / len(series)
    for ax, op in zip(axes, ("get", "put"), strict=True):
        for i, s in enumerate(series):
            vals = [result["pages"][pg].get(s, {}).get(op, 0.0) for pg in pages]
            label = MOONCAKE_SERIES if s == "mooncake" else s
            bars = ax.bar([p + i * width for p in range(len(pages))], vals, width, label=label)
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        labels = []
        for pg in pages:
            e = result["pages"][pg]
            vs_mc = e[f"{op}_ratio_vs_mooncake"]
            labels.append(
                f"{pg}\n{base}/socket {e[f'{op}_ratio_vs_socket']:.2f}"
                + (f", /mooncake {vs_mc:.2f}x" if vs_mc is not None else ", mooncake n/a")
            )
        ax.set_xticks([p + 0.4 - width / 2 for p in range(len(pages))], labels, fontsize=8)
        ax.set_title(op)
        ax.set_ylabel("GB/s")
        legend_under(ax)
    fig.suptitle(
        f"bench remote: our transports vs a raw socket and Mooncake Store, batched, loopback TCP, "
        f"median of {result['repeats']}"
    )
    reason = result.get("mooncake", {}).get("reason")
    if reason:
        fig.supxlabel(f"Mooncake: {reason[:150]}", fontsize=7)
    fig.savefig(path)
    plt.close(fig)
