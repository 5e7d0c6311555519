"""Remote DRAM pool over loopback: NodeClient get/put vs a raw socket baseline (and Mooncake).

Starts a memory node in a child process, then for each page size moves ``--total`` bytes in
batches through ``NodeClient`` (tcp and local engines) and through a plain socket pair doing the
same sendmsg/recv_into transfer with no protocol, and reports throughput and ratios.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from hicache_mooncake.transport import ClientOptions, NodeClient
from hicache_mooncake.transport.sockio import recv_into_exact, send_all

MiB = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="1MiB,8MiB", help="page sizes (MiB units)")
    parser.add_argument("--total-mib", type=int, default=256, help="bytes moved per measurement")
    parser.add_argument("--batch-mib", type=int, default=32, help="bytes per batched call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", default="tcp,local")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_node(tmp: Path, capacity: int) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    cfg = tmp / "node.yaml"
    ready = tmp / "node.ready"
    cfg.write_text(
        yaml.safe_dump(
            {
                "node": {"node_id": "bench", "port": port, "capacity": capacity},
                "metadata": {"backend": "embedded"},
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "hicache_mooncake", "node", "--config", str(cfg), "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, HICACHE_NODE_SECRET="bench"),
    )
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("memory node did not start")
        time.sleep(0.02)
    return proc, port


def _socket_baseline(page: int, total: int, batch: int, repeats: int) -> dict[str, float]:
    """Same transfer with no protocol: a server process (like the node) sends/receives raw bytes
    over loopback with the same sendmsg/recv_into calls."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        arena = memoryview(bytearray(batch))
        sink = memoryview(bytearray(batch))
        conn, _ = srv.accept()
        with conn:
            hdr = bytearray(9)
            while True:
                try:
                    recv_into_exact(conn, memoryview(hdr), None)
                except Exception:
                    return
                op, n = hdr[0], int.from_bytes(hdr[1:], "big")
                if op == 1:  # put
                    recv_into_exact(conn, sink[:n], None)
                    conn.sendall(b"k")
                else:
                    send_all(conn, [arena[:n]], None)

    t = multiprocessing.get_context("fork").Process(target=serve, daemon=True)
    t.start()
    cli = socket.create_connection(("127.0.0.1", port))
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    src = memoryview(bytearray(os.urandom(batch)))
    dst = memoryview(bytearray(batch))
    ack = memoryview(bytearray(1))
    best = {"put": 0.0, "get": 0.0}
    for _ in range(repeats):
        for op in ("put", "get"):
            t0 = time.perf_counter()
            moved = 0
            while moved < total:
                n = min(batch, total - moved)
                if op == "put":
                    send_all(cli, [memoryview(b"\x01" + n.to_bytes(8, "big")), src[:n]], None)
                    recv_into_exact(cli, ack, None)
                else:
                    send_all(cli, [memoryview(b"\x02" + n.to_bytes(8, "big"))], None)
                    recv_into_exact(cli, dst[:n], None)
                moved += n
            best[op] = max(best[op], total / (time.perf_counter() - t0) / 1e9)
    cli.close()
    srv.close()
    t.join(5)
    if t.is_alive():
        t.kill()
    return best


def _node_client(port: int, engine: str, page: int, total: int, batch: int, repeats: int) -> dict[str, float]:
    c = NodeClient("127.0.0.1", port, ClientOptions(timeout_s=30, secret=b"bench"), engine)
    per_batch = max(1, batch // page)
    buf = memoryview(bytearray(os.urandom(page * per_batch)))
    out = memoryview(bytearray(page * per_batch))
    best = {"put": 0.0, "get": 0.0}
    try:
        for r in range(repeats):
            n_pages = total // page
            keys = [f"{engine}-{page}-{r}-{i}" for i in range(n_pages)]
            t0 = time.perf_counter()
            for i in range(0, n_pages, per_batch):
                ks = keys[i : i + per_batch]
                ok = c.put_batch([(k, [buf[j * page : (j + 1) * page]]) for j, k in enumerate(ks)])
                assert all(ok), "put failed"
            best["put"] = max(best["put"], total / (time.perf_counter() - t0) / 1e9)
            t0 = time.perf_counter()
            for i in range(0, n_pages, per_batch):
                ks = keys[i : i + per_batch]
                ok = c.get_batch_into([(k, [out[j * page : (j + 1) * page]]) for j, k in enumerate(ks)])
                assert all(ok), "get failed"
            best["get"] = max(best["get"], total / (time.perf_counter() - t0) / 1e9)
            assert out[:page] == buf[:page]
            c.clear()
    finally:
        c.close()
    return best


def _mooncake_reason() -> str:
    try:
        import mooncake.store  # noqa: F401
    except Exception as exc:
        return f"mooncake-transfer-engine-non-cuda is not installed here ({type(exc).__name__}: {exc})"
    return "Mooncake Store comparison not wired into this benchmark yet"


def run(args: argparse.Namespace) -> int:
    sizes = [int(s.strip().lower().removesuffix("mib")) * MiB for s in args.sizes.split(",")]
    total = args.total_mib * MiB
    batch = args.batch_mib * MiB
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    result: dict[str, Any] = {
        "unit": "GB/s (1e9 B/s), best of repeats",
        "total_bytes": total,
        "batch_bytes": batch,
        "pages": {},
    }
    mooncake_reason = _mooncake_reason()
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = _start_node(Path(tmp), total + 64 * MiB)
        try:
            for page in sizes:
                sock = _socket_baseline(page, total, batch, args.repeats)
                entry: dict[str, Any] = {"socket": sock}
                for eng in engines:
                    entry[eng] = _node_client(port, eng, page, total, batch, args.repeats)
                tcp = entry.get("tcp", entry[engines[0]])
                entry["get_ratio_vs_socket"] = round(tcp["get"] / sock["get"], 3)
                entry["put_ratio_vs_socket"] = round(tcp["put"] / sock["put"], 3)
                entry["get_ratio_vs_mooncake"] = None
                entry["put_ratio_vs_mooncake"] = None
                entry["mooncake_reason"] = mooncake_reason
                result["pages"][f"{page // MiB}MiB"] = entry
                print(
                    f"{page // MiB:>2} MiB pages: socket get {sock['get']:.2f} put {sock['put']:.2f} GB/s | "
                    + " | ".join(f"{e} get {entry[e]['get']:.2f} put {entry[e]['put']:.2f}" for e in engines)
                    + f" | tcp/socket get {entry['get_ratio_vs_socket']:.2f} put {entry['put_ratio_vs_socket']:.2f}"
                )
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(15)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    if args.plot_out:
        _plot(result, args.plot_out, engines)
    return 0


def _plot(result: dict[str, Any], path: str, engines: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pages = list(result["pages"])
    series = ["socket", *engines]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, op in zip(axes, ("get", "put"), strict=True):
        width = 0.8 / len(series)
        for i, s in enumerate(series):
            ax.bar(
                [p + i * width for p in range(len(pages))],
                [result["pages"][pg][s][op] for pg in pages],
                width,
                label=s,
            )
        ax.set_xticks([p + 0.4 - width / 2 for p in range(len(pages))], pages)
        ax.set_title(f"{op} over loopback")
        ax.set_ylabel("GB/s")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
