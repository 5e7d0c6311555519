"""Eviction and admission policies behind a registry (``make_policy("s3fifo")``).

Importing this package registers every built-in policy; a new policy is a new module here plus
one import line below.
"""

from . import chain, lru, reuse, s3fifo, tinylfu  # noqa: F401  (registration side effects)
from .base import DEFAULT_CONTEXT, AccessContext, EvictionPolicy, ObjectType
from .registry import make_policy, policy_factory, policy_names, register_policy

__all__ = [
    "DEFAULT_CONTEXT",
    "AccessContext",
    "EvictionPolicy",
    "ObjectType",
    "make_policy",
    "policy_factory",
    "policy_names",
    "register_policy",
]
