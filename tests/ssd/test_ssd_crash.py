"""SIGKILL in the middle of a write storm: no wrong byte, every acknowledged page found."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from ssd_helpers import check_get, open_engine, value_for

CHILD = os.path.join(os.path.dirname(__file__), "crash_child.py")


def _read_acks(path: str) -> tuple[dict[str, int], bool, bool]:
    acks: dict[str, int] = {}
    ready = done = False
    if not os.path.exists(path):
        return acks, ready, done
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                continue  # partial line at kill time: not acknowledged
            if line.startswith("#ready"):
                ready = True
            elif line.startswith("#done"):
                done = True
            else:
                k, s = line.split()
                acks[k] = int(s)
    return acks, ready, done


@pytest.mark.integration
def test_sigkill_during_write_storm(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = str(tmp_path / "ssd")
    rng = random.Random(7)
    all_acked: dict[str, int] = {}
    procs: list[subprocess.Popen[bytes]] = []
    torn_total = 0
    rounds = 12
    try:
        for rnd in range(rounds):
            ackfile = str(tmp_path / f"ack{rnd}")
            mode = "on" if rnd % 2 == 0 else "off"
            p = subprocess.Popen(
                [sys.executable, CHILD, d, ackfile, str(rnd), mode, str(24 << 20)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            procs.append(p)
            deadline = time.monotonic() + 20
            while not _read_acks(ackfile)[1]:
                assert p.poll() is None, p.stderr.read().decode() if p.stderr else "child died"
                assert time.monotonic() < deadline, "child did not start"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.02, 0.25))
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            acks, _, done = _read_acks(ackfile)
            all_acked.update(acks)
            with open_engine(d, capacity_bytes=512 << 20, region_size=4 << 20, direct_io=mode) as e:
                st = e.stats()
                torn_total += st["recover_torn"] + st["recover_corrupt"]
                for k, s in all_acked.items():
                    assert check_get(e, k, s), f"round {rnd}: acknowledged {k} lost (done={done})"
                # every key the engine has (acknowledged or not) must hold exactly the right bytes
                for k in e.keys():
                    size = e.object_size(k)
                    assert size is not None
                    out = np.zeros(size, np.uint8)
                    if e.get_into(k, [memoryview(out)]):
                        assert np.array_equal(out, value_for(k, size)), f"round {rnd}: wrong bytes for {k}"
        assert len(all_acked) > 50, "storm too short to be meaningful"
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
    print(
        f"acked {len(all_acked)} keys over {rounds} kills; torn/corrupt entries skipped at recovery: {torn_total}"
    )
