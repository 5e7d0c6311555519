"""A host cache client in its own process (no SGLang): ``client_proc.py MODE YAML OUT [GO]``.

- ``race``: wait for the GO file, open the host cache (starting it if needed), store one page
  named after this process, report the service pid;
- ``reserve-and-die``: reserve a page (ALLOC) and die without committing it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import numpy as np

from hicache_mooncake.config import read_yaml_file, validate_config
from hicache_mooncake.store_builder import build_client_store
from hicache_mooncake.transport import wire


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    mode, yaml_path, out = sys.argv[1], sys.argv[2], sys.argv[3]
    config = validate_config(read_yaml_file(yaml_path))
    if mode == "race":
        go = sys.argv[4]
        while not os.path.exists(go):
            time.sleep(0.005)
    store = build_client_store(config, "rank0", True)
    tier = store.tiers[0]
    page = np.full(8192, os.getpid() % 251, dtype=np.uint8)
    if mode == "race":
        ok = store.put_batch([f"race-{os.getpid()}"], [[memoryview(page)]])
        service = tier.stats()["service"]
        with open(out, "w") as f:
            json.dump({"service_pid": service.get("pid"), "stored": ok, "client": os.getpid()}, f)
        store.close()
        return
    client = tier.client  # type: ignore[attr-defined]
    conn = client.pool.acquire(time.monotonic() + 5)
    _, meta = conn.request(wire.Op.ALLOC, wire.encode_put([("orphan", 256 << 10, 0)], conn.limits))
    status = int(wire.decode_alloc_records(meta, 1)["status"][0])
    with open(out, "w") as f:
        json.dump({"status": status}, f)
    os._exit(9)  # dies holding the reservation


if __name__ == "__main__":
    main()
