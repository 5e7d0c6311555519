"""The one error type a bad configuration raises."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration was refused. The message names the source, the key path and the reason.

    Raised before anything is allocated or opened, so a refused config never half-applies.
    """
