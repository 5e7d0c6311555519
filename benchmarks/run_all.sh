#!/usr/bin/env bash
# Reproduce every figure in benchmarks/results/ (JSON + PNG). Run after `scripts/dev.sh setup`,
# as root: bench ssd drops the whole host's page cache (--drop-caches) and lets the kernel
# allocate huge pages for fio's buffers (--hugepages, restored after); bench remote installs
# Mooncake Store and libibverbs1 when missing (--pip-install-mooncake --apt-install-ibverbs) and
# runs it in a private network namespace. Takes about 30-40 minutes on a 2-core machine; run
# nothing else meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
HM=.venv/bin/hicache-mooncake
OUT=benchmarks/results
TRACE=${TRACE:-../shared/traces/conversation_trace.jsonl}
mkdir -p "$OUT"
"$HM" bench sglang --json "$OUT/bench_sglang.json" --plot "$OUT/bench_sglang.png"
"$HM" bench ssd --drop-caches --hugepages --json "$OUT/bench_ssd.json" --plot "$OUT/bench_ssd.png"
"$HM" bench gil --json "$OUT/bench_gil.json"
"$HM" bench gil_io --drop-caches --json "$OUT/bench_gil_io.json" --plot "$OUT/bench_gil_io.png"
"$HM" bench remote --pip-install-mooncake --apt-install-ibverbs --json "$OUT/bench_remote.json" --plot "$OUT/bench_remote.png"
"$HM" bench scale --drop-caches --json "$OUT/bench_scale.json" --plot "$OUT/bench_scale.png"
if [[ -f "$TRACE" ]]; then
  "$HM" replay "$TRACE" --json "$OUT/replay_public.json" --plot "$OUT/replay_public.png"
  "$HM" bench rewarm --trace "$TRACE" --json "$OUT/bench_rewarm.json"
else
  echo "no trace at $TRACE (set TRACE=...): replay skipped"
fi
