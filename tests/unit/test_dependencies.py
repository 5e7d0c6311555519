"""The pinned stack agrees with itself: ``pip check`` finds no version conflict, and the only
missing requirements are the ones left out on purpose (``requirements/sglang-cpu.txt`` is
installed with ``--no-deps``), each listed here with its reason."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NO_DEPS_FILE = REPO / "requirements" / "sglang-cpu.txt"

_SGLANG_GPU = "GPU kernels and CUDA tooling: nothing on the CPU test stack imports them"
_SGLANG_SERVER = "SGLang's HTTP/gRPC server and API frontends: the tests never start the server"
_SGLANG_MODELS = "model loading, tokenizers, grammars, multimodal and datasets: no model is run here"

#: requirer -> {missing requirement: why it is not installed}
DELIBERATE_GAPS: dict[str, dict[str, str]] = {
    "sglang": {
        **dict.fromkeys(
            [
                "cuda-python",
                "flash-attn-4",
                "flashinfer-python",
                "humming-kernels",
                "kernels",
                "ninja",
                "numba",
                "nvidia-cutlass-dsl",
                "nvidia-mathdx",
                "nvidia-ml-py",
                "nvshmem4py-cu13",
                "quack-kernels",
                "sgl-deep-ep",
                "sgl-deep-gemm",
                "sgl-flash-mla",
                "sglang-kernel",
                "tilelang",
                "torch-memory-saver",
            ],
            _SGLANG_GPU,
        ),
        **dict.fromkeys(
            [
                "anthropic",
                "fastapi",
                "openai-harmony",
                "py-spy",
                "python-multipart",
                "setproctitle",
                "smg-grpc-servicer",
                "uvicorn",
                "uvloop",
                "watchfiles",
            ],
            _SGLANG_SERVER,
        ),
        **dict.fromkeys(
            [
                "blobfile",
                "build",
                "datasets",
                "deepseek-recipe",
                "easydict",
                "einops",
                "interegular",
                "llguidance",
                "mistral-common",
                "modelscope",
                "outlines",
                "scipy",
                "soundfile",
                "tiktoken",
                "timm",
                "tml-renderers",
                "torchaudio",
                "torchcodec",
                "xgrammar",
                "zstandard",
            ],
            _SGLANG_MODELS,
        ),
    },
    "ipython": dict.fromkeys(
        ["ipython-pygments-lexers", "jedi", "matplotlib-inline", "pexpect", "prompt-toolkit", "stack-data"],
        "SGLang imports IPython for its debugging helpers only; the interactive shell is never run",
    ),
    "huggingface-hub": {
        "click": "the `hf` command line only",
        "hf-xet": "Xet-backed downloads only; nothing is downloaded here",
    },
    "transformers": {"typer": "the `transformers` command line only"},
}

_MISSING = re.compile(r"^(\S+) \S+ requires (\S+), which is not installed\.$")


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _no_deps_packages() -> set[str]:
    lines = NO_DEPS_FILE.read_text().splitlines()
    return {
        _canon(re.split(r"[=<>!~ ]", ln.strip())[0]) for ln in lines if ln.strip() and not ln.startswith("#")
    }


def test_pip_check_finds_only_the_deliberate_gaps() -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    conflicts, unexpected = [], []
    for line in proc.stdout.splitlines():
        missing = _MISSING.match(line.strip())
        if missing is None:
            if line.strip() and not line.startswith("No broken requirements"):
                conflicts.append(line)
            continue
        requirer, requirement = _canon(missing[1]), _canon(missing[2])
        if requirement not in DELIBERATE_GAPS.get(requirer, {}):
            unexpected.append(line)
    assert not conflicts, "version conflicts in the pinned stack:\n" + "\n".join(conflicts)
    assert not unexpected, "missing requirements that are not deliberate:\n" + "\n".join(unexpected)


def test_gaps_are_only_where_dependencies_were_skipped_on_purpose() -> None:
    """A gap is deliberate only for a package installed with --no-deps."""
    assert set(DELIBERATE_GAPS) <= _no_deps_packages()
