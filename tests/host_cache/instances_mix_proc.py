"""One SGLang-like rank process (no SGLang): ``instances_mix_proc.py NAME KIND TP_RANK TP_SIZE YAML DIR``.

It does what the backend does at attach with the YAML as given: ``use_host_cache`` (the
``tiers.host_cache`` decision for its KV kind and TP size), ``build_client_store`` with the backend's
rank tag, and the backend's key space for its model geometry (``build_keyspace``). A writer
(every MHA rank, MLA rank 0) stores ``PAGES`` pages; then every rank reads its model's pages and
checks them byte for byte. It writes ``DIR/<name>.json`` (decision, hits, exact) and keeps the
store open until ``DIR/stop`` exists, so the instances of a test coexist as servers do.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from hicache_mooncake.config import read_yaml_file, validate_config
from hicache_mooncake.host_cache.mode import use_host_cache
from hicache_mooncake.keys import RankInfo, build_keyspace
from hicache_mooncake.store_builder import build_client_store

PAGES = 8
GEOMETRY = {
    "mha": {
        "layout": "page_first",
        "page_size": 16,
        "layer_num": 4,
        "head_num": 8,
        "head_dim": 16,
        "dtype": "bf16",
    },
    "mla": {"layout": "page_first", "page_size": 16, "layer_num": 4, "kv_lora_rank": 64, "dtype": "bf16"},
}
PAGE_BYTES = {"mha": 16384, "mla": 6144}


def page(kind: str, i: int) -> np.ndarray:
    return np.random.default_rng([ord(kind[1]), i]).integers(0, 256, PAGE_BYTES[kind], dtype=np.uint8)


def main() -> None:
    name, kind, rank, size, yaml_path, out = sys.argv[1:7]
    tp_rank, tp_size, out_dir = int(rank), int(size), Path(out)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = validate_config(read_yaml_file(yaml_path))
    mla = kind == "mla"
    on, why = use_host_cache(config, mla, tp_size)
    store = build_client_store(config, f"rank{tp_rank}_0_0_0", on)
    ranks = RankInfo(tp_rank=tp_rank, tp_size=tp_size, replicated_kv=mla)
    space = build_keyspace(f"model-{kind}", "", dict(GEOMETRY[kind]), "v1", ranks)
    keys = space.keys([f"page{i}" for i in range(PAGES)])
    stored: list[bool] = []
    if not mla or tp_rank == 0:
        stored = store.put_batch(keys, [[memoryview(page(kind, i))] for i in range(PAGES)])
    bufs = [np.zeros(PAGE_BYTES[kind], dtype=np.uint8) for _ in range(PAGES)]
    hits = store.get_batch_into(keys, [[memoryview(b)] for b in bufs])
    exact = [bytes(b) == bytes(page(kind, i)) for i, b in enumerate(bufs)]
    result = {
        "host_cache": on,
        "why": why,
        "stored": stored,
        "hits": hits,
        "exact": exact,
        "tiers": [t.name for t in store.tiers],
    }
    (out_dir / f"{name}.json").write_text(json.dumps(result))
    while not (out_dir / "stop").exists():
        time.sleep(0.05)
    store.close()


if __name__ == "__main__":
    main()
