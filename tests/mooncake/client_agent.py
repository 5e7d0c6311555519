"""One SGLang-side process of the Mooncake cluster tests (run by ``mooncake_procs.Agent``).

``python client_agent.py '<extra config JSON>' TMP`` (TMP: the test's folder) builds SGLang's runtime context, a real host KV
pool, and our backend through SGLang's storage-backend factory (``dynamic`` loader), then answers
one JSON command per stdin line with one JSON line on stdout:

- ``{"op": "set", "tag": t, "n": n, "seed": s}``: fill n pages with seeded random bytes, store them
  under keys ``t0..`` with ``batch_set_v1``: ``ok`` per page, ``digests`` (sha256 of each page);
- ``{"op": "get", "tag": t, "n": n}``: ``batch_exists`` then ``batch_get_v1`` into fresh pages:
  ``exists``, ``ok`` per page, ``digests`` of what landed, ``elapsed`` of the get;
- ``{"op": "storm", "seconds": s, "n": n, "local": t}``: sets of new pages and gets of them for
  s seconds, and gets of the pages ``t`` held in local DRAM: ``calls``, ``max_call_s``, ``errors``
  (exceptions that escaped the backend: must stay empty), hit counts per phase;
- ``{"op": "exists_as", "tenant": u, "tag": t, "n": n}``: ``batch_exists`` through a second
  backend of this process whose namespace has tenant u;
- ``{"op": "legacy_set" | "legacy_get", ...}``: the same through SGLang's legacy (non-v1) path;
- ``{"op": "hybrid_set" | "hybrid_get", "tag": t, "n": n[, "seed": s]}``: a KV + Mamba model (SGLang's
  ``HostPoolGroup``, a second backend of this process registered through the v2 calls): n KV pages
  with ``batch_set_v1`` and the Mamba state of the last one with ``batch_set_v2``; the get answers
  ``batch_exists_v2`` (``kv_hit_pages``, ``restorable``) and the bytes of both that landed;
- ``{"op": "stats"}``: ``tier_stats()``;
- ``{"op": "close"}``: close every backend (SGLang detaching the storage backend): ``close_s``;
- ``{"op": "quit"}``: close them (if not yet), answer, and exit at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

SHAPE: Any = None


def runtime(tmp: str) -> None:
    """SGLang's published runtime context and a 1-rank gloo group (what the scheduler sets up);
    the group's file store lies under ``tmp`` (the test's folder: removed with it)."""
    import torch.distributed as dist
    from sglang.srt.server_args import ServerArgs
    from sglang.test.parallel_groups import publish

    args = ServerArgs(
        model_path="dummy",
        device="cpu",
        page_size=SHAPE.page_size,
        enable_hierarchical_cache=True,
        hicache_io_backend="direct",
        hicache_mem_layout="page_first_direct",
        hicache_ratio=2.0,
        hicache_write_policy="write_through",
        hicache_storage_prefetch_policy="wait_complete",
    )
    publish(args, role="test")
    store = Path(tempfile.mkdtemp(prefix="agent-gloo-", dir=tmp)) / "store"
    dist.init_process_group("gloo", store=dist.FileStore(str(store), 1), rank=0, world_size=1)


class Agent:
    def __init__(self, extra: dict[str, Any]) -> None:
        from hicache_mooncake.tools.sglang_harness import make_host_pool

        self.host = make_host_pool("page_first", False, SHAPE)
        self.extra = extra
        self.backend = self._backend(extra)
        self.ps = SHAPE.page_size
        self.tenants: dict[str, Any] = {}
        self.hybrid: tuple[Any, Any] | None = None

    def close(self) -> float:
        """Close every backend of this process (once); the seconds it took."""
        t0 = time.monotonic()
        hybrid = [self.hybrid[1]] if self.hybrid is not None else []
        for backend in [self.backend, *self.tenants.values(), *hybrid]:
            backend.close()
        self.tenants, self.hybrid = {}, None
        return time.monotonic() - t0

    def _backend(self, extra: dict[str, Any]) -> Any:
        from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

        from hicache_mooncake.tools.sglang_harness import make_storage_config

        cfg = make_storage_config(extra, layout="page_first")
        backend = StorageBackendFactory.create_backend("dynamic", cfg, self.host)
        backend.register_mem_pool_host(self.host)
        return backend

    def exists_as(self, tenant: str, tag: str, n: int) -> dict[str, Any]:
        """``batch_exists`` through a second backend of this process configured for another
        tenant (another deployment sharing the Mooncake cluster)."""
        if tenant not in self.tenants:
            self.tenants[tenant] = self._backend({**self.extra, "namespace": {"tenant": tenant}})
        return {"exists": self.tenants[tenant].batch_exists(self.keys(tag, n))}

    @staticmethod
    def keys(tag: str, n: int) -> list[str]:
        return [f"{tag}{i:060x}" for i in range(n)]

    def _digests(self, idx: Any) -> list[str]:
        from hicache_mooncake.tools.sglang_harness import page_snapshot

        return [hashlib.sha256(t.numpy().tobytes()).hexdigest() for t in page_snapshot(self.host, idx)]

    def _zero(self, idx: Any) -> None:
        zeros = self.host.get_dummy_flat_data_page().zero_()
        for i in range(0, len(idx), self.ps):
            self.host.set_from_flat_data_page(int(idx[i]), zeros)

    def set(self, tag: str, n: int, seed: int) -> dict[str, Any]:
        from hicache_mooncake.tools.sglang_harness import fill_random_pages

        idx = self.host.alloc(n * self.ps)
        try:
            fill_random_pages(self.host, idx, seed)
            t0 = time.monotonic()
            ok = self.backend.batch_set_v1(self.keys(tag, n), idx)
            return {"ok": ok, "digests": self._digests(idx), "elapsed": time.monotonic() - t0}
        finally:
            self.host.free(idx)

    def get(self, tag: str, n: int) -> dict[str, Any]:
        idx = self.host.alloc(n * self.ps)
        try:
            self._zero(idx)  # what a hit leaves there came from the pool
            t0 = time.monotonic()
            exists = self.backend.batch_exists(self.keys(tag, n))
            t1 = time.monotonic()
            ok = self.backend.batch_get_v1(self.keys(tag, n), idx)
            t2 = time.monotonic()
            return {
                "exists": exists,
                "ok": ok,
                "digests": self._digests(idx),
                "exists_elapsed": t1 - t0,
                "elapsed": t2 - t1,
            }
        finally:
            self.host.free(idx)

    def _hybrid(self) -> tuple[Any, Any]:
        """A KV + Mamba model's host pools and a backend over them (built once, as SGLang's
        ``HybridCacheController`` attaches one: factory with the anchor, then the v2 registrations)."""
        if self.hybrid is None:
            from sglang.srt.mem_cache.hicache_storage import PoolName
            from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

            from hicache_mooncake.tools.sglang_harness import (
                host_pool_for,
                make_device_pool,
                make_storage_config,
            )
            from hicache_mooncake.tools.sglang_hybrid import (
                host_group,
                make_mamba_device_pool,
                mamba_host_pool_for,
                register_group,
            )

            dev, mdev = make_device_pool(False, SHAPE), make_mamba_device_pool()
            group = host_group(
                [
                    (PoolName.KV, host_pool_for(dev, "page_first", False, SHAPE), dev),
                    (PoolName.MAMBA, mamba_host_pool_for(mdev, "page_first"), mdev),
                ]
            )
            cfg = make_storage_config(self.extra, layout="page_first")
            backend = StorageBackendFactory.create_backend("dynamic", cfg, group.anchor_entry.host_pool)
            register_group(backend, group)
            self.hybrid = (group, backend)
        return self.hybrid

    @staticmethod
    def _state_transfer(keys: list[str], slot: Any = None) -> Any:
        from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

        return PoolTransfer(
            name=PoolName.MAMBA, host_indices=slot, keys=keys, hit_policy=PoolHitPolicy("trailing_pages")
        )

    def hybrid_set(self, tag: str, n: int, seed: int) -> dict[str, Any]:
        from sglang.srt.mem_cache.hicache_storage import PoolName

        from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

        group, backend = self._hybrid()
        kv, mamba = group.get_pool(PoolName.KV), group.get_pool(PoolName.MAMBA)
        keys = self.keys(tag, n)
        src, slot = kv.alloc(n * self.ps), mamba.alloc(1)
        fill_random_pages(kv, src, seed)
        fill_random_pages(mamba, slot, seed + 1)
        ok = backend.batch_set_v1(keys, src)
        state = backend.batch_set_v2([self._state_transfer(keys[-1:], slot)])
        return {
            "ok": ok,
            "state_ok": state[PoolName.MAMBA],
            "digests": [hashlib.sha256(t.numpy().tobytes()).hexdigest() for t in page_snapshot(kv, src)],
            "state_digest": hashlib.sha256(page_snapshot(mamba, slot)[0].numpy().tobytes()).hexdigest(),
        }

    def hybrid_get(self, tag: str, n: int) -> dict[str, Any]:
        from sglang.srt.mem_cache.hicache_storage import PoolName

        from hicache_mooncake.tools.sglang_harness import fill_random_pages, page_snapshot

        group, backend = self._hybrid()
        kv, mamba = group.get_pool(PoolName.KV), group.get_pool(PoolName.MAMBA)
        keys = self.keys(tag, n)
        hit = backend.batch_exists_v2(keys, [self._state_transfer(["x"])])
        dst, slot = kv.alloc(n * self.ps), mamba.alloc(1)
        fill_random_pages(kv, dst, 999)  # what a hit leaves there came from the pool
        fill_random_pages(mamba, slot, 998)
        ok = backend.batch_get_v1(keys, dst)
        state = backend.batch_get_v2([self._state_transfer(keys[-1:], slot)])
        return {
            "kv_hit_pages": hit.kv_hit_pages,
            "restorable": list(hit.restorable_prefix_pages),
            "ok": ok,
            "state_ok": state[PoolName.MAMBA],
            "digests": [hashlib.sha256(t.numpy().tobytes()).hexdigest() for t in page_snapshot(kv, dst)],
            "state_digest": hashlib.sha256(page_snapshot(mamba, slot)[0].numpy().tobytes()).hexdigest(),
        }

    def legacy_set(self, tag: str, n: int, seed: int) -> dict[str, Any]:
        """SGLang's legacy copy path: ``batch_set`` of fresh flat page tensors (not in the
        registered host pool)."""
        import torch

        gen = torch.Generator().manual_seed(seed)
        template = self.host.get_dummy_flat_data_page()
        nbytes = template.numel() * template.element_size()
        pages = [torch.randint(0, 255, (nbytes,), generator=gen, dtype=torch.uint8) for _ in range(n)]
        stored = self.backend.batch_set(self.keys(tag, n), [p.view(template.dtype) for p in pages])
        return {"stored": stored, "digests": [hashlib.sha256(p.numpy().tobytes()).hexdigest() for p in pages]}

    def legacy_get(self, tag: str, n: int) -> dict[str, Any]:
        """``batch_get`` into fresh flat tensors (the legacy path)."""
        import torch

        template = self.host.get_dummy_flat_data_page()
        got = self.backend.batch_get(self.keys(tag, n), [torch.zeros_like(template) for _ in range(n)])
        return {
            "ok": [g is not None for g in got],
            "digests": [
                hashlib.sha256(g.view(torch.uint8).numpy().tobytes()).hexdigest() if g is not None else ""
                for g in got
            ],
        }

    def storm(self, seconds: float, n: int, local: str) -> dict[str, Any]:
        """Calls as SGLang makes them, for ``seconds``; exceptions are recorded, never raised."""
        out: dict[str, Any] = {"calls": 0, "max_call_s": 0.0, "errors": [], "set_ok": 0, "set_pages": 0}
        out.update({"get_ok": 0, "get_pages": 0, "local_ok": 0, "local_pages": 0})
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            for kind in ("set", "get", "local"):
                t0 = time.monotonic()
                try:
                    if kind == "set":
                        r = self.set(f"storm{i}-", n, seed=1000 + i)
                    else:
                        r = self.get(f"storm{i}-" if kind == "get" else local, n)
                    out[f"{kind}_ok"] += sum(r["ok"])
                    out[f"{kind}_pages"] += n
                except Exception as exc:
                    out["errors"].append(f"{kind}: {type(exc).__name__}: {exc}")
                out["calls"] += 1
                out["max_call_s"] = max(out["max_call_s"], time.monotonic() - t0)
            i += 1
        return out


def main() -> int:
    global SHAPE
    from hicache_mooncake.tools.sglang_harness import PoolShape

    SHAPE = PoolShape(page_size=16, layers=3, heads=2, head_dim=64, device_tokens=2048)
    extra = json.loads(sys.argv[1])
    try:
        runtime(sys.argv[2])
        agent = Agent(extra)
    except Exception:
        print(json.dumps({"fatal": traceback.format_exc()}), flush=True)
        return 1
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            if op == "quit":
                close_s = agent.close()
                print(json.dumps({"ok": True, "close_s": close_s}), flush=True)
                # no interpreter or Mooncake exit handlers: Mooncake's tears down every client,
                # and an HA client's teardown waits up to 30 s for its leader watch
                os._exit(0)
            if op == "close":
                answer = {"close_s": agent.close()}
            elif op == "ping":
                answer: dict[str, Any] = {"tiers": [t.name for t in agent.backend.store.tiers]}
            elif op == "stats":
                answer = agent.backend.tier_stats()
            else:
                answer = getattr(agent, op)(**cmd)
        except Exception:
            answer = {"fatal": traceback.format_exc()}
        print(json.dumps(answer, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
