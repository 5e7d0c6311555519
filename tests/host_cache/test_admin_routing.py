"""Where ``hicache-mooncake admin`` sends each action when ranks keep their tiers in a host cache:
tier and tenant actions to the service once (never to its client ranks, which hold no DRAM or SSD
tier), hints to the ranks (they map page hashes; the service cannot), show/ops everywhere; and a
tier action whose host cache registered no endpoint is refused naming it (not skipped silently)."""

from __future__ import annotations

import pytest

from hicache_mooncake.admin.client import RankEndpoint
from hicache_mooncake.host_cache.admin_routing import TIER_ACTIONS, endpoints_for

SOCK = "/run/u/hicache-mooncake/host-cache.sock"
SERVICE = RankEndpoint(
    "http://127.0.0.1:1", {"role": "host-cache", "host_cache": "host-cache", "socket": SOCK}
)
CLIENTS = [
    RankEndpoint(
        f"http://127.0.0.1:{10 + r}", {"rank": str(r), "host_cache": "host-cache", "host_cache_socket": SOCK}
    )
    for r in range(2)
]
OWN = RankEndpoint("http://127.0.0.1:20", {"rank": "0", "model": "other"})  # a rank with its own tiers


@pytest.mark.parametrize("action", TIER_ACTIONS)
def test_tier_actions_go_to_the_service_once_and_to_ranks_with_their_own_tiers(action: str) -> None:
    assert endpoints_for(action, [*CLIENTS, SERVICE, OWN]) == [SERVICE, OWN]


def test_hints_go_to_the_ranks_and_show_goes_everywhere() -> None:
    found = [*CLIENTS, SERVICE, OWN]
    assert endpoints_for("hint", found) == [*CLIENTS, OWN]
    assert endpoints_for("show", found) == found and endpoints_for("ops", found) == found


def test_a_tier_action_for_a_cache_without_its_service_endpoint_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="host-cache.sock.*registered no admin endpoint"):
        endpoints_for("resize", [*CLIENTS, OWN])
    assert endpoints_for("hint", CLIENTS) == CLIENTS
