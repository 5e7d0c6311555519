"""Fixtures of the runtime-operation tests: stores built by the real store builder, and admin
endpoints on loopback (real sockets, a real token file) in front of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ops_helpers import TOKEN

from hicache_mooncake.admin.client import AdminClient
from hicache_mooncake.admin.routes import AdminContext
from hicache_mooncake.admin.server import AdminServer
from hicache_mooncake.admin.tier_factory import TierFactory
from hicache_mooncake.config import BackendConfig
from hicache_mooncake.config.admin import AdminConfig
from hicache_mooncake.store_builder import build_store
from hicache_mooncake.tiers.tiered_store import TieredStore


@pytest.fixture
def stores() -> Iterator[Callable[[BackendConfig], TieredStore]]:
    built: list[TieredStore] = []

    def make(config: BackendConfig) -> TieredStore:
        store = build_store(config, "rank0")
        built.append(store)
        return store

    yield make
    for store in built:
        store.close()


@pytest.fixture
def admin_for(tmp_path: Path) -> Iterator[Callable[..., AdminClient]]:
    """``admin_for(store, config, rank=0, model="m", store_keys=None)``: an admin endpoint (port 0,
    token file) over ``store`` (``store_keys``: the page hash -> store key mapping hints use, as the
    backend passes it); returns a client that carries the token."""
    servers: list[AdminServer] = []
    token_file = tmp_path / "admin.token"
    token_file.write_text(TOKEN + "\n")

    def make(
        store: TieredStore,
        config: BackendConfig,
        rank: int = 0,
        model: str = "m",
        store_keys: Callable[[list[str], str | None], list[str]] | None = None,
    ) -> AdminClient:
        cfg = AdminConfig(port=0, token_file=str(token_file), discovery_dir=str(tmp_path / "discovery"))
        context = AdminContext(
            store,
            TierFactory(config, "rank0"),
            labels={"model": model, "rank": str(rank)},
            store_keys=store_keys,
        )
        server = AdminServer(cfg, context, rank)
        server.start()
        servers.append(server)
        return AdminClient(server.url, TOKEN)

    yield make
    for server in servers:
        server.close()
