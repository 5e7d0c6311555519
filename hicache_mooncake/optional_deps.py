"""Optional dependencies, checked by each command before it does any work.

torch, SGLang, redis and matplotlib are not hard dependencies (``pyproject.toml``: users bring
their own CUDA build of torch and SGLang; redis serves only the cluster metadata; matplotlib only
plots). A command that needs one calls ``require`` first, so a missing one is one line naming the
pip extra that installs it and exit status 2 (the CLI maps ``MissingDependency`` there), never a
traceback after minutes of work.

``require`` imports the module (not just looks it up): an installed but broken module (a torch
whose CUDA libraries do not load) is reported the same way, with the import's own reason.
"""

from __future__ import annotations

import importlib

# top-level module -> the extra of ``hicache-mooncake`` that installs it
EXTRA_OF: dict[str, str] = {
    "torch": "sglang",  # SGLang depends on torch; a CUDA build of both may be brought instead
    "sglang": "sglang",
    "redis": "cluster",
    "matplotlib": "bench",
    "aiofiles": "bench",  # only the aiofiles leg of ``bench ssd``
}


class MissingDependency(Exception):
    """An optional module the command needs cannot be imported. ``str()`` is the one line the CLI
    prints (exit status 2)."""

    def __init__(self, module: str, extra: str, needed_for: str = "", reason: str = "") -> None:
        super().__init__(module, extra, needed_for, reason)
        self.module, self.extra, self.needed_for, self.reason = module, extra, needed_for, reason

    def __str__(self) -> str:
        why = f" ({self.reason})" if self.reason and "No module named" not in self.reason else ""
        what = f"{self.needed_for} needs" if self.needed_for else "needs"
        return (
            f"{what} {self.module}, which is not installed{why}: pip install 'hicache-mooncake[{self.extra}]'"
        )


def require(*modules: str, needed_for: str = "") -> None:
    """Import each of ``modules`` (top-level names in ``EXTRA_OF``) or raise ``MissingDependency``
    for the first that fails. ``needed_for`` (an option, say ``--plot``) starts the message
    "<needed_for> needs <module>"; the CLI prefixes the command's name."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MissingDependency(module, EXTRA_OF.get(module, module), needed_for, str(exc)) from None


def missing_from_import_error(exc: ImportError) -> MissingDependency | None:
    """The ``MissingDependency`` an ``ImportError`` raised mid-command stands for, when it names a
    known optional module (a check a command forgot); None for anything else (a real bug)."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if isinstance(exc, ModuleNotFoundError) and name in EXTRA_OF:
        return MissingDependency(name, EXTRA_OF[name], "", str(exc))
    return None
