"""The random clear race, with kill -9 (issue 48, item 1): three threads set and get a real store
(DRAM + SSD, regions reclaimed) while ``clear`` runs every 0.2-1.5 s; the process is killed
with SIGKILL at random moments and restarted on the same directory, for a minute. No page
written before a completed clear is ever served after it: not by the running process, not after
a restart (``clear_race_child.py`` judges every page served against its fsynced sidecar log)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

RUN_S = 62.0
CHILD = Path(__file__).with_name("clear_race_child.py")


def text_of(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def test_no_page_written_before_a_completed_clear_is_served_after_it_across_kill_9(tmp_path: Path) -> None:
    d = tmp_path / "ssd"
    d.mkdir()
    log = tmp_path / "race.log"
    rng = random.Random(48)
    env = {**os.environ, "CLEAR_RACE_LIFE_S": "600"}
    end = time.monotonic() + RUN_S
    lives = kills = 0
    while time.monotonic() < end:
        seed = rng.randrange(1 << 30)
        child = subprocess.Popen(
            [sys.executable, str(CHILD), "run", str(d), str(log), str(seed)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        lives += 1
        try:
            opened = time.monotonic() + 60
            while f"O {child.pid}\n" not in text_of(log) and child.poll() is None:
                assert time.monotonic() < opened, "the child did not open the store in 60 s"
                time.sleep(0.05)
            time.sleep(min(rng.uniform(1.5, 5.0), max(0.5, end - time.monotonic())))
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                kills += 1
            out, _ = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
        assert child.returncode == -signal.SIGKILL, out.decode(errors="replace")[-3000:]
    verify = subprocess.run(
        [sys.executable, str(CHILD), "verify", str(d), str(log), "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    lines = log.read_text(errors="replace").splitlines()
    violations = [x for x in lines if x.startswith("V ")]
    cleared = {int(x.split()[1]) for x in lines if x.startswith("C ") and x.split()[1].isdigit()}
    served = sum(int(x.split()[1]) for x in lines if x.startswith("G ") and x.split()[1].isdigit())
    reclaimed = max([int(x.split()[1]) for x in lines if x.startswith("R ") and x.split()[1].isdigit()] + [0])
    print(f"lives={lives} kills={kills} clears={len(cleared)} served={served} reclaimed={reclaimed}")
    assert violations == [], violations[:10]
    assert kills >= 6 and len(cleared) >= 20 and served > 1000 and reclaimed > 0
