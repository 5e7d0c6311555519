"""The host cache: one service per host running one store (shared-memory DRAM arena, SSD tier,
placement) for every SGLang process of the host, and the client side of it.

The service runs the same ``TieredStore`` a process runs in-process (DESIGN.md §2 "Where the tiers
live").

- ``paths``: where a named host cache lives (socket, lock, log, config snapshot);
- ``lock``: the lock file that makes exactly one service run per name;
- ``launcher``: start the service detached, handing the lock over with no gap;
- ``service``: the service process (``hicache-mooncake host-cache``);
- ``keeper``: a backend's background thread that keeps the service running and reachable;
- ``client``: open the client tier; ``mode``: whether a backend uses the host cache;
- ``authority``: who configures the host's cache (the running service's file) and what a client
  whose YAML differs is told.
"""
