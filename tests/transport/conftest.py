"""Process fixtures (redis_server, node_factory) live in tests/conftest.py, shared by every suite."""
