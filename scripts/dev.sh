#!/usr/bin/env bash
# One entry point that sets up everything on a fresh machine, then runs what you asked for.
#   scripts/dev.sh demo    # install (once) and run the demo on the embedded default config
#   scripts/dev.sh test    # install (once) and run lint, format check, type check and the test suite
#   scripts/dev.sh setup   # only install
# The virtualenv lives in .venv (override with VENV=...). Re-running is cheap: installs are skipped
# while the requirement files are unchanged (a stamp in the venv records their hash).
set -euo pipefail
export HICACHE_NATIVE_WERROR=1  # a warning in native/src fails our builds (setup.py)
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
PY=${PYTHON:-}

pick_python() {
  for cand in "$PY" python3.11 python3; do
    [[ -n "$cand" ]] || continue
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 11))'; then
      echo "$cand"; return 0
    fi
  done
  echo "error: Python >= 3.11 is required (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

system_packages() {
  # Services the tests start for real (redis-server; etcd for Mooncake's master HA), the library the
  # Mooncake wheel loads even for TCP (libibverbs1), the benchmark's raw-disk baseline (fio), and
  # rdma-core's real pyverbs, which the RDMA simulator's API is checked against (no device needed).
  local missing=()
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1 ' || missing+=(libibverbs1)
  command -v fio >/dev/null 2>&1 || missing+=(fio)
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)  # verifies the host cache's unit
  /usr/bin/python3 -c 'import pyverbs' >/dev/null 2>&1 || missing+=(python3-pyverbs)
  # The native extension (native/src, C11) is compiled on install: a C compiler and Python's headers.
  command -v gcc >/dev/null 2>&1 || missing+=(gcc)
  local python; python=$(pick_python)
  "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "warning: ${missing[*]} missing and not root; tests that need them will be skipped" >&2
    return 0
  fi
  echo "==> apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

setup() {
  local python; python=$(pick_python)
  [[ -x "$VENV/bin/python" ]] || { echo "==> creating $VENV"; "$python" -m venv "$VENV"; }
  local stamp="$VENV/.hicache-mooncake-stamp"
  local want; want=$(cat requirements/*.txt pyproject.toml | sha256sum | cut -c1-16)
  if [[ -f "$stamp" && $(cat "$stamp") == "$want" ]]; then
    echo "==> $VENV is up to date"
  else
    echo "==> installing the pinned stack into $VENV (first time: ~4 min, ~6 GB)"
    "$VENV/bin/pip" install -q -r requirements/torch.txt
    "$VENV/bin/pip" install -q --no-deps -r requirements/sglang-cpu.txt
    "$VENV/bin/pip" install -q --no-deps -r requirements/sglang-server.txt   # tests/e2e: SGLang's HTTP server
    "$VENV/bin/pip" install -q -r requirements/dev.txt
    "$VENV/bin/pip" install -q --no-deps -r requirements/mooncake.txt
    "$VENV/bin/pip" install -q --no-deps -e .
    echo "$want" > "$stamp"
  fi
  build_native
}

build_native() {
  # The C extension hicache_mooncake.native._core, rebuilt in place when a source under native/src
  # changed (setuptools compares timestamps; ~1 s when nothing changed). A warning fails the build.
  # A build whose compiled-in source hash is not the sources' (their bytes changed but not their
  # timestamps: files copied with old times) is rebuilt with --force (native/_source_hash.py).
  local log; log=$(mktemp)
  if ! "$VENV/bin/python" setup.py -q build_ext --inplace >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"
    echo "error: building the native extension failed (see above)" >&2
    return 1
  fi
  if "$VENV/bin/python" -c "import hicache_mooncake.native" 2>&1 | grep -q "built from other sources"; then
    if ! "$VENV/bin/python" setup.py -q build_ext --inplace --force >"$log" 2>&1; then
      cat "$log" >&2; rm -f "$log"
      echo "error: building the native extension failed (see above)" >&2
      return 1
    fi
  fi
  rm -f "$log"
}

run_tests() {
  echo "==> ruff (lint + format check)"
  "$VENV/bin/ruff" check .
  "$VENV/bin/ruff" format --check .
  echo "==> mypy"
  "$VENV/bin/python" scripts/typecheck.py
  echo "==> native sanitizers (the native tests against an AddressSanitizer + UBSan build)"
  VENV=$VENV bash scripts/native_sanitize.sh
  echo "==> pytest (next to a running default-preset host cache: the suite must not depend on the host's)"
  local hc_pid hc_dir rc=0
  read -r hc_pid hc_dir <<<"$(start_foreign_host_cache)"
  trap 'stop_foreign_host_cache "$hc_pid" "$hc_dir"' INT TERM
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" || rc=$?
  stop_foreign_host_cache "$hc_pid" "$hc_dir"
  trap - INT TERM
  return "$rc"
}

start_foreign_host_cache() {
  # A host cache service from the shipped default preset (test-sized, never idle-stopped) at the
  # per-user default paths, as on a production host; prints its PID and the folder of its YAML and
  # log (stop_foreign_host_cache removes it).
  local dir; dir=$(mktemp -d)
  "$VENV/bin/python" - "$dir/host-cache.yaml" <<'PY'
import sys, yaml
data = yaml.safe_load(open("configs/default.yaml"))
data["tiers"]["dram"].update(capacity="64MiB", slab_size="8MiB", prefault=False)
data["tiers"]["ssd"].update(capacity="256MiB", min_free=0)
data["host_cache"].update(idle_timeout_s=0)
yaml.safe_dump(data, open(sys.argv[1], "w"))
PY
  "$VENV/bin/python" -m hicache_mooncake host-cache --config "$dir/host-cache.yaml" >"$dir/log" 2>&1 </dev/null &
  echo "$! $dir"
}

stop_foreign_host_cache() {
  local pid=$1 dir=${2:-} i
  if [[ -n "$pid" ]] && kill -TERM "$pid" 2>/dev/null; then
    for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  if [[ -n "$dir" && -f "$dir/host-cache.yaml" ]]; then rm -rf "$dir"; fi
  return 0
}

cmd=${1:-test}; shift || true
case "$cmd" in
  setup) system_packages; setup ;;
  demo) setup; "$VENV/bin/hicache-mooncake" demo "$@" ;;
  test) system_packages; setup; run_tests "$@" ;;
  *) echo "usage: scripts/dev.sh {demo|test|setup} [args]" >&2; exit 2 ;;
esac
