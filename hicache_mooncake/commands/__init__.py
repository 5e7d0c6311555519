"""CLI subcommands: each module defines ``register(subparsers)`` (see ``hicache_mooncake.cli``)."""


class UsageError(Exception):
    """A command cannot run as asked (bad arguments, a missing file, tool or optional dependency).

    The CLI prints the message (one line, no traceback) and exits with status 2.
    """
