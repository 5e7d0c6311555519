#!/usr/bin/env bash
# Builds the native extension with AddressSanitizer + UBSan into its own directory (the normal
# in-place build is untouched) and runs the native tests against it; any sanitizer report fails.
#   scripts/native_sanitize.sh                 # tests/native + the native-index tests (below)
#   scripts/native_sanitize.sh tests/ssd ...   # other test paths instead
# CPython itself is not instrumented: libasan is preloaded so its allocator is in place first, and
# leak detection is off (CPython keeps memory at exit by design).
set -euo pipefail
export HICACHE_NATIVE_WERROR=1  # a warning in native/src fails our builds (setup.py)
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
OUT=${NATIVE_SANITIZE_DIR:-$ROOT/build/native-asan}
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
start=$(date +%s)

log=$(mktemp)
if ! HICACHE_NATIVE_EXTRA_CFLAGS="$SAN -g" HICACHE_NATIVE_EXTRA_LDFLAGS="$SAN" \
    "$VENV/bin/python" setup.py -q build_ext --build-lib "$OUT/lib" --build-temp "$OUT/tmp" >"$log" 2>&1; then
  cat "$log" >&2; rm -f "$log"
  echo "error: the sanitizer build of the native extension failed" >&2
  exit 1
fi
rm -f "$log"
core_dir=$OUT/lib/hicache_mooncake/native
libasan=$(gcc -print-file-name=libasan.so)
[[ -f "$libasan" ]] || { echo "error: libasan not found (gcc -print-file-name=libasan.so)" >&2; exit 1; }

export HICACHE_MOONCAKE_NATIVE_CORE_DIR=$core_dir
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=99
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=99
# The check that the instrumented module is the one loaded, then the tests.
LD_PRELOAD=$libasan "$VENV/bin/python" - "$core_dir" <<'PY'
import sys
from hicache_mooncake.native import _core
assert _core.__file__.startswith(sys.argv[1]), f"loaded {_core.__file__}, not the sanitizer build"
PY
# By default: the native tests (the reuse policy's recency log among them), the SSD and DRAM tests
# that drive their indexes on the native table, read SSD entries natively and copy SGLang's pool parts natively, the DRAM
# tier's slab allocator (held to its reference model, and through the tier's resizes), and the
# reuse policy's own tests (its batches one native ReuseLedger call, every access a RecencyLog touch), the placement's
# batches (its resident and DRAM orders and the LRU policy's order are native KeyOrders), S3-FIFO on its KeyOrder queues (a file listed here that is gone
# fails the run: update the list with the move). All of tests/ssd passes too, in ~2 min: too long for every CI run.
paths=("$@")
((${#paths[@]})) || paths=(
  tests/native
  tests/ssd/test_ssd_index.py tests/ssd/test_ssd_fingerprint_collisions.py tests/ssd/test_ssd_native_checksums.py
  tests/tiers/test_dram_native_index.py tests/unit/test_dram_tier.py tests/unit/test_slab_allocator.py tests/unit/test_dram_resize.py
  tests/policy/test_placement_reuse.py tests/policy/test_reuse_sweep.py tests/policy/test_reuse_native.py
  tests/policy/test_set_batch.py tests/policy/test_s3fifo_native.py
)
LD_PRELOAD=$libasan "$VENV/bin/python" -m pytest -q -p no:cacheprovider --capture=sys "${paths[@]}"
echo "native sanitizers: ok in $(($(date +%s) - start)) s"
