"""The backend's own admin endpoint: per-tier operations at runtime (``server.py``, ``routes.py``),
and the client the ``hicache-mooncake admin`` command uses (``client.py``)."""
