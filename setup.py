"""Build of the native extension ``hicache_mooncake.native._core`` (C11, CPython C API).

Everything else about the distribution lives in pyproject.toml; this file only declares the
extension, because setuptools reads ``ext_modules`` from setup.py. ``HICACHE_NATIVE_WERROR=1``
(set by scripts/dev.sh, so by CI and every developer build) makes a warning fail the build; a
user's ``pip install`` on another compiler keeps warnings as warnings. xxh3 is not compiled in: it
is loaded at run time (see docs/native.md). The hash of the sources is compiled in
(``_core.SOURCE_HASH``, ``native/_source_hash.py``): a checkout whose C changed since the build is
refused at import, naming the rebuild.
"""

from __future__ import annotations

import importlib.util
import os
from glob import glob
from pathlib import Path

from setuptools import Extension, setup


def _source_hash() -> str:
    """``native/_source_hash.py``'s hash of native/src, loaded by path (nothing is built yet)."""
    spec = importlib.util.spec_from_file_location("_source_hash", Path("native") / "_source_hash.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.source_hash(Path("native") / "src"))


# scripts/native_sanitize.sh builds a separate copy with sanitizers by adding flags here.
EXTRA_CFLAGS = os.environ.get("HICACHE_NATIVE_EXTRA_CFLAGS", "").split()
EXTRA_LDFLAGS = os.environ.get("HICACHE_NATIVE_EXTRA_LDFLAGS", "").split()
WERROR = ["-Werror"] if os.environ.get("HICACHE_NATIVE_WERROR") == "1" else []

setup(
    ext_modules=[
        Extension(
            "hicache_mooncake.native._core",
            sources=sorted(glob("native/src/*.c")),
            depends=sorted(glob("native/src/*.h")),
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", *WERROR, "-pthread", *EXTRA_CFLAGS],
            extra_link_args=["-pthread", *EXTRA_LDFLAGS],
            libraries=["dl"],
            define_macros=[("HM_SOURCE_HASH", f'"{_source_hash()}"')],
        )
    ]
)
