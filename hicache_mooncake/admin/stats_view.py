"""The admin side of ``hicache-mooncake stats``: each rank's layout report (``GET /v1/layout``) read
from its admin endpoint, and the ranks that serve metrics but no admin endpoint (disabled, or it
could not start: the rank's log has one ERROR saying why, ``server.unavailable_message``).

The endpoints are found in the admin discovery directory (``admin.discovery_dir`` of ``--config``,
else the default one); the token is the operator's (``admin.token_file`` / ``$admin.token_env`` of
that configuration) or the generated one in that directory. Nothing here raises: an endpoint that
cannot be read is listed with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.config.errors import ConfigError

from .auth import load_token, read_token_file, token_path
from .client import AdminClient, AdminError, rank_endpoints
from .server import discovery_dir

UNAVAILABLE = (
    "no admin endpoint registered for this rank: admin.port is null, or the endpoint could not "
    "start (the rank's log says why: 'admin endpoint NOT started')"
)


def admin_config(config_path: str | None) -> AdminConfig:
    if not config_path:
        return AdminConfig()
    from hicache_mooncake.config import load_config_file

    return load_config_file(config_path).config.admin


def _token(config: AdminConfig) -> str | None:
    try:
        return load_token(config) or read_token_file(token_path(discovery_dir(config)))
    except (FileNotFoundError, ConfigError):
        return None


def admin_section(ranks: Sequence[dict[str, str]], config: AdminConfig, timeout_s: float) -> dict[str, Any]:
    """``{"endpoints": [{model, rank, url, layout | error}], "unavailable": [{model, rank, why}]}``
    for the ranks (metrics labels) ``stats`` found."""
    directory = discovery_dir(config)
    try:
        found = rank_endpoints(directory)
    except OSError:
        found = []
    token = _token(config) if found else None
    endpoints: list[dict[str, Any]] = []
    for endpoint in found:
        entry: dict[str, Any] = {
            "model": endpoint.labels.get("model", ""),
            "rank": endpoint.labels.get("rank", ""),
            "url": endpoint.url,
        }
        try:
            entry["layout"] = AdminClient(endpoint.url, token, timeout_s).layout()
        except AdminError as exc:
            entry["error"] = str(exc)
        endpoints.append(entry)
    served = {(e["model"], e["rank"]) for e in endpoints}
    unavailable = [
        {"model": labels.get("model", ""), "rank": labels.get("rank", ""), "why": UNAVAILABLE}
        for labels in ranks
        if (labels.get("model", ""), labels.get("rank", "")) not in served
    ]
    return {"discovery_dir": str(directory), "endpoints": endpoints, "unavailable": unavailable}
