#!/usr/bin/env bash
# The RDMA checks on this host's real device (soft-RoCE rxe0 or a NIC; see docs/rdma.md): the same
# transport conformance suite CI runs on the verbs simulator, here unskipped on the device, then
# `bench remote --engine tcp,rdma`. Extra arguments go to the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$PWD/.venv}
PY="$VENV/bin/python"
if [[ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]]; then
  echo "no RDMA device under /sys/class/infiniband: set one up first (docs/rdma.md)" >&2
  exit 2
fi
if ! "$PY" -c 'import pyverbs' 2>/dev/null; then
  # Debian/Ubuntu's python3-pyverbs is built for the system Python; expose only that package
  [[ -d /usr/lib/python3/dist-packages/pyverbs ]] || { echo "install python3-pyverbs (docs/rdma.md)" >&2; exit 2; }
  shim=$(mktemp -d)
  trap 'rm -rf "$shim"' EXIT
  ln -s /usr/lib/python3/dist-packages/pyverbs "$shim/pyverbs"
  export PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}"
fi
unset HICACHE_RDMA_SIM HICACHE_FAKE_RDMA
echo "==> devices: $(ls /sys/class/infiniband | tr '\n' ' ')(the tests use the first)"
"$PY" -m pytest -q -p no:cacheprovider -s tests/transport/test_conformance.py -k rdma
"$PY" -m hicache_mooncake bench remote --engine tcp,rdma --no-mooncake --json rdma-bench.json "$@"
