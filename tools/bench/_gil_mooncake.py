"""The Mooncake Store leg of ``bench gil`` (not a target: the leading underscore hides it).

Run by ``bench gil`` as ``unshare -n -- python -m hicache_mooncake.tools.bench._gil_mooncake
JSON``, in a private network namespace (the master's HTTP metadata server binds every interface,
see ``_mooncake_runner``): it starts a master and a segment holder (``running_store``), then in
this process, beside its client, runs the legs of ``_gil_meter.measure_leg`` with
``MooncakeWorkers`` and prints ``GIL_RESULT {json}`` (or ``GIL_ERROR {json}``). The busy loop must
share the interpreter with the client, so the leg runs here, not in ``bench gil``'s process.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

MiB = 1 << 20


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    from hicache_mooncake.tools.bench._gil_meter import measure_leg
    from hicache_mooncake.tools.bench._gil_workloads import MooncakeWorkers
    from hicache_mooncake.tools.bench._mooncake_runner import running_store

    page, batch, batches = spec["page_bytes"], spec["batch_pages"], spec["batches"]
    stored, repeats = spec["stored_batches"], spec["repeats"]
    written = (stored + repeats * 2 * batches) * batch * page
    segment = int(written / 0.8) + 64 * MiB  # below the master's 0.95 eviction watermark
    info: dict[str, Any] = {}
    with running_store(segment, info, spec.get("allow_shared_netns", False)) as store:
        w = MooncakeWorkers(store, page, batch, stored)
        try:
            if w.store_all() != stored * batch:
                raise RuntimeError("Mooncake refused some of the stored pages")
            runs = [
                measure_leg(w, batches, spec["busy_alone_s"], first_backup=r * 2 * batches)
                for r in range(repeats)
            ]
            served, bad = w.verify()
        finally:
            w.close()
    out = summarize(runs)
    out.update(pages_verified=served, bad_pages=bad, mooncake=info)
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of every figure (each ratio the median of the runs' own ratios), the
    failed pages summed, and every run."""
    counts = ("failed_pages", "failed_sets", "missed_gets")
    out: dict[str, Any] = {
        k: statistics.median(float(r[k]) for r in runs) for k in runs[0] if k not in counts
    }
    out.update({k: sum(int(r[k]) for r in runs) for k in counts})
    out["runs"] = runs
    return out


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    try:
        spec = json.loads(args[0])
    except (IndexError, json.JSONDecodeError):
        print(
            f"usage: unshare -n -- python -m {__spec__.name if __spec__ else __name__} SPEC_JSON "
            "(started by `hicache-mooncake bench gil`)",
            file=sys.stderr,
        )
        return 2
    try:
        result = measure(spec)
    except Exception as exc:
        print(f"GIL_ERROR {json.dumps({'error': f'{type(exc).__name__}: {exc}'})}", flush=True)
        return 1
    print(f"GIL_RESULT {json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
