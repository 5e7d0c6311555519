"""The lookup API's latency (POST /v1/lookup): which pages a rank holds, asked by a router.

A real store (DRAM + SSD in a temporary directory) holds ``--pages`` pages, part in DRAM, part
demoted to the SSD; an admin endpoint on loopback serves it (token required). Each request names
``--keys`` page hashes (a held prefix, then misses). Reported per case, p50 / p99 / max in
milliseconds: ``where_batch`` (the store's index lookups alone), ``handler`` (the route: parse the
keys, map them, look up, build the answer) and ``http`` (a client's whole request on a fresh
connection from another process: connect, send, the server's selector and worker, the JSON
reply). Optionally
``--load-threads`` threads run set/get on other pages meanwhile (as SGLang's backup and prefetch
threads do).

    python -m hicache_mooncake.tools.bench.lookup --json       (or: hicache-mooncake bench lookup)

Method and figures: docs/benchmarks-notes.md (``bench lookup`` section).
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hicache_mooncake.admin.lookup_routes import lookup
from hicache_mooncake.admin.routes import AdminContext
from hicache_mooncake.admin.server import AdminServer
from hicache_mooncake.commands import UsageError
from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.config.loader import validate_config
from hicache_mooncake.keys import KeySpace, RankInfo, build_keyspace
from hicache_mooncake.store_builder import build_store
from hicache_mooncake.tiers.tiered_store import TieredStore

PAGE = 16 << 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=int, default=128, help="page hashes per request (default 128)")
    parser.add_argument("--pages", type=int, default=4096, help="pages the store holds (default 4096)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per case (default 2000)")
    parser.add_argument("--load-threads", type=int, default=0, help="set/get threads meanwhile (default 0)")


def _config(work: Path) -> Any:
    return validate_config(
        {
            "tiers": {
                "policy": "lru",
                "dram": {"capacity": "32MiB", "slab_size": "1MiB", "prefault": False},
                "ssd": {
                    "enabled": True,
                    "path": str(work / "ssd"),
                    "capacity": "256MiB",
                    "region_size": "4MiB",
                    "min_free": 0,
                    "direct_io": "off",
                },
                "warm": {"interval_s": 0},
            }
        }
    )


def _fill(store: TieredStore, space: KeySpace, hashes: list[str]) -> None:
    data = np.zeros(PAGE, np.uint8)
    for first in range(0, len(hashes), 64):
        batch = space.keys(hashes[first : first + 64])
        store.put_batch(batch, [[data.data] for _ in batch])
    store.flush(60)


def _quantiles(samples: list[float]) -> dict[str, float]:
    ms = np.array(samples) * 1e3
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 4),
        "p99_ms": round(float(np.percentile(ms, 99)), 4),
        "max_ms": round(float(ms.max()), 4),
        "n": len(samples),
    }


def _timed(requests: int, call: Callable[[], object]) -> dict[str, float]:
    for _ in range(min(50, requests)):  # warm up
        call()
    samples = []
    for _ in range(requests):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return _quantiles(samples)


def _http_call(port: int, token: str, body: bytes) -> Callable[[], object]:
    def call() -> object:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request(
                "POST",
                "/v1/lookup",
                body,
                {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            reply = conn.getresponse()
            data = reply.read()
            if reply.status != 200:
                raise RuntimeError(f"lookup answered {reply.status}: {data[:200]!r}")
            return data
        finally:
            conn.close()

    return call


def _client_process(
    ports: list[int], token: str, body: bytes, requests: int, work: Path
) -> list[dict[str, float]]:
    """``http`` timed from another process (a router is one: the server's threads then share the
    GIL with nothing of the client's), one request to each port in turn (so a change of the
    machine's load hits every case alike)."""
    (work / "body.json").write_bytes(body)
    (work / "client.token").write_text(token)
    out = subprocess.run(
        [sys.executable, "-m", "hicache_mooncake.tools.bench.lookup", "--client", str(work), str(requests)]
        + [str(p) for p in ports],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the client process failed: {out.stderr[-2000:]}")
    return list(json.loads(out.stdout))


def _client_main(work: Path, requests: int, ports: list[int]) -> int:
    token, body = (work / "client.token").read_text(), (work / "body.json").read_bytes()
    calls = [_http_call(port, token, body) for port in ports]
    for call in calls:
        for _ in range(min(50, requests)):  # warm up
            call()
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(requests):
        for call, into in zip(calls, samples, strict=True):
            start = time.perf_counter()
            call()
            into.append(time.perf_counter() - start)
    print(json.dumps([_quantiles(s) for s in samples]))
    return 0


def _load(store: TieredStore, space: KeySpace, stop: threading.Event, seed: int) -> None:
    data = np.zeros(PAGE, np.uint8)
    out = np.zeros(PAGE, np.uint8)
    keys = space.keys([f"load{seed}-{i:060x}" for i in range(64)])
    i = 0
    while not stop.is_set():
        batch = keys[i % 8 * 8 : i % 8 * 8 + 8]
        store.put_batch(batch, [[data.data] for _ in batch])
        store.get_batch_into(batch, [[out.data] for _ in batch])
        i += 1


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hicache-bench-lookup-") as tmp:
        work = Path(tmp)
        store = build_store(_config(work), "rank0")
        space = build_keyspace("bench", "", {"page_size": 64}, "v1", RankInfo())
        hashes = [f"{i:064x}" for i in range(args.pages)]
        _fill(store, space, hashes)
        token = secrets.token_urlsafe(24)
        (work / "token").write_text(token + "\n")
        context = AdminContext(
            store,
            labels={"model": "bench", "rank": "0"},
            store_keys=lambda h, t: (space.for_tenant(t) if t is not None else space).keys(h),
        )
        cfg = AdminConfig(port=0, token_file=str(work / "token"), discovery_dir=str(work / "disc"))
        server = AdminServer(cfg, context)
        port = server.start()
        baseline = AdminServer(cfg, context, index=1, inline=False)  # every request to a worker
        baseline_port = baseline.start()
        stop = threading.Event()
        loaders = [
            threading.Thread(target=_load, args=(store, space, stop, n), daemon=True)
            for n in range(args.load_threads)
        ]
        try:
            for t in loaders:
                t.start()
            held = args.keys * 3 // 4
            step = max(1, args.pages // held)  # held pages across the store (DRAM and SSD), then misses
            asked = hashes[::step][:held] + [f"{i:064x}" for i in range(10**9, 10**9 + args.keys - held)]
            body = json.dumps({"keys": asked}).encode()
            answer = json.loads(_http_call(port, token, body)())  # type: ignore[arg-type]
            keys = space.keys(asked)
            result = {
                "keys": args.keys,
                "pages": args.pages,
                "load_threads": args.load_threads,
                "answer": {"longest_prefix": answer["longest_prefix"], "counts": answer["counts"]},
                "where_batch": _timed(args.requests, lambda: store.where_batch(keys)),
                "handler": _timed(args.requests, lambda: lookup(context, json.loads(body))),
                **dict(
                    zip(
                        ("http", "http_via_worker"),
                        _client_process([port, baseline_port], token, body, args.requests, work),
                        strict=True,
                    )
                ),
                "tiers": {t.name: store.stats().get(t.name, {}).get("entries", 0) for t in store.tiers},
            }
        finally:
            stop.set()
            for t in loaders:
                t.join(10)
            server.close()
            baseline.close()
            store.close()
        return result


def run(args: argparse.Namespace) -> int:
    """``bench lookup`` (``--json OUT`` writes the result there) and ``python -m`` (``--json``
    prints it instead of the table)."""
    if args.keys < 1 or args.pages < 1 or args.requests < 1 or args.load_threads < 0:
        raise UsageError("--keys, --pages and --requests must be at least 1, --load-threads at least 0")
    result = measure(args)
    if getattr(args, "json_out", None):
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    if getattr(args, "json_stdout", False):
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"lookup of {result['keys']} keys over {result['pages']} pages {result['tiers']}, "
        f"{result['load_threads']} load threads; answer {result['answer']}"
    )
    for case in ("where_batch", "handler", "http", "http_via_worker"):
        q = result[case]
        print(f"  {case:16s} p50 {q['p50_ms']:.3f} ms  p99 {q['p99_ms']:.3f} ms  max {q['max_ms']:.3f} ms")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--client"]:  # the client process of the ``http`` cases
        return _client_main(Path(argv[1]), int(argv[2]), [int(p) for p in argv[3:]])
    parser = argparse.ArgumentParser(
        prog="python -m hicache_mooncake.tools.bench.lookup", description=__doc__
    )
    parser.add_argument("--json", dest="json_stdout", action="store_true", help="print JSON, not the table")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
