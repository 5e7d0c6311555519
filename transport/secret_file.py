"""Reading a shared secret from a file named in the configuration.

``read_secret_file(path, key)`` returns the file's bytes, stripped of surrounding whitespace.
A file that is missing, is not a regular file or cannot be read raises ``ValueError`` whose
message names the setting (``key``, e.g. ``tiers.remote.secret_file``), the path and the fix;
never a bare ``OSError``. An empty file is returned as empty (the caller decides whether running
without a secret is allowed).
"""

from __future__ import annotations

import os


def read_secret_file(path: str, key: str) -> bytes:
    full = os.path.expanduser(path)
    try:
        with open(full, "rb") as f:
            return f.read().strip()
    except FileNotFoundError:
        raise ValueError(
            f"{key}: {path!r} does not exist: write the shared secret into that file (the same on "
            f"nodes and clients), or unset {key} to read it from the environment variable instead"
        ) from None
    except IsADirectoryError:
        raise ValueError(f"{key}: {path!r} is a directory, not a file holding the shared secret") from None
    except OSError as exc:
        raise ValueError(f"{key}: {path!r} cannot be read: {exc.strerror or exc}") from None
