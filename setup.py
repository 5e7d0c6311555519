"""Build of the native extension ``hicache_mooncake.native._core`` (C11, CPython C API).

Everything else about the distribution lives in pyproject.toml; this file only declares the
extension, because setuptools reads ``ext_modules`` from setup.py. ``HICACHE_NATIVE_WERROR=1``
(set by scripts/dev.sh, so by CI and every developer build) makes a warning fail the build; a
user's ``pip install`` on another compiler keeps warnings as warnings. xxh3 is not compiled in: it
is loaded at run time (see docs/native.md).
"""

from __future__ import annotations

import os
from glob import glob

from setuptools import Extension, setup

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
        )
    ]
)
