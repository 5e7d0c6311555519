"""The whole check of one YAML, shared by ``config validate``, ``launch`` and (in part) the backend.

In order, each stage adding findings (``error`` refuses):

1. SGLang's own extra-config parsing of the file (``config.sglang_parse``): what SGLang does with
   ``--hicache-storage-backend-extra-config @FILE`` before our backend exists (an empty file, a
   missing loader key, a prefetch key of the wrong type);
2. our loader, exactly as the backend runs it, ``$HICACHE_MOONCAKE_CONFIG`` included: when it is
   set the backend reads THAT file instead (inline keys ignored), so that file is the one checked
   from here on, and a warning says so;
3. the ``sglang:`` section against our tiers and this host's memory (``checks.launch``);
4. this host: SSD directories and free space, shared memory, ports (``checks.environment``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hicache_mooncake.checks.environment import environment_findings
from hicache_mooncake.checks.findings import Finding, errors
from hicache_mooncake.checks.launch import check
from hicache_mooncake.config import (
    CONFIG_ENV,
    BackendConfig,
    ConfigError,
    load_backend_config,
    load_config_file,
)
from hicache_mooncake.config.loader import config_file_path
from hicache_mooncake.config.sglang_parse import sglang_refusals


@dataclass
class Validation:
    path: Path
    """The file named (what SGLang parses)."""
    config: BackendConfig | None = None
    """What the backend would run with (None when refused before it could be built)."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return bool(errors(self.findings))


def env_override(path: Path, environ: Mapping[str, str]) -> Path | None:
    """The file ``$HICACHE_MOONCAKE_CONFIG`` names when it is set to another file than ``path``."""
    other = environ.get(CONFIG_ENV)
    if not other:
        return None
    other_path = config_file_path(other)
    try:
        same = other_path.resolve() == path.resolve()
    except OSError:
        same = False
    return None if same else other_path


def validate_file(
    path: str | os.PathLike[str], ranks: int, environ: Mapping[str, str] | None = None
) -> Validation:
    """Every stage of the module docstring for ``path`` served by ``ranks`` processes on this host."""
    env = os.environ if environ is None else environ
    result = Validation(config_file_path(path))
    result.findings += sglang_refusals(result.path)
    try:
        loaded = load_config_file(result.path)
    except ConfigError as exc:
        result.findings.append(Finding("error", str(exc)))
        return result
    config = loaded.config
    other = env_override(result.path, env)
    if other is not None:
        result.findings.append(
            Finding(
                "warning",
                f"${CONFIG_ENV}={other} is set: the backend reads that file instead of {result.path} (whose keys "
                "other than SGLang's are then ignored); checked below as the backend will run it",
            )
        )
        try:
            config = load_backend_config(loaded.data, environ=env, source=str(result.path))
        except ConfigError as exc:
            result.findings.append(Finding("error", str(exc)))
            return result
    result.config = config
    result.findings += check(config, ranks)
    result.findings += environment_findings(config, ranks)
    return result
