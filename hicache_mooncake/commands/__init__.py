"""CLI subcommands: each module defines ``register(subparsers)`` (see ``hicache_mooncake.cli``)."""
