#!/usr/bin/env bash
# The e2e tier (tests/e2e) against a real CUDA SGLang server: no CPU patches, no CPU flags, the
# presets' own host-pool layout (page_first + the kernel io backend), pinned host memory
# (cudaHostRegister) and sgl_kernel's transfer kernels. Run it on the first machine with an NVIDIA
# GPU:   bash scripts/gpu-e2e.sh [extra pytest args]
# It installs what the CPU stack leaves out on purpose (SGLang's GPU kernels, pinned to what
# sglang 0.5.23 requires) into the project's venv, then runs `pytest -m e2e` with
# HICACHE_E2E_DEVICE=cuda. Exit status: pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
command -v nvidia-smi >/dev/null || { echo "gpu-e2e: no nvidia-smi: this script needs an NVIDIA GPU" >&2; exit 2; }
nvidia-smi -L
[[ -x "$VENV/bin/python" ]] || bash scripts/dev.sh setup
# sglang 0.5.23's GPU requirements (installed with --no-deps like the rest of SGLang's stack)
"$VENV/bin/pip" install -q --no-deps sglang-kernel==0.4.10 "flashinfer_python==0.7.2" ninja nvidia-ml-py "cuda-python>=13.0"
"$VENV/bin/python" - <<'PY'
import torch
assert torch.cuda.is_available(), "torch does not see the GPU"
print("cuda", torch.version.cuda, torch.cuda.get_device_name(0))
PY
export HICACHE_E2E_DEVICE=cuda
export HICACHE_E2E_START_TIMEOUT_S=${HICACHE_E2E_START_TIMEOUT_S:-600}
exec "$VENV/bin/python" -m pytest -m e2e -p no:cacheprovider -ra -s tests/e2e "$@"
