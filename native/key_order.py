"""KeyOrder: an insertion-ordered map of str or int keys to int64 values (as
``collections.OrderedDict``), with the batch calls the placement's and the LRU policy's hot paths
make once per store call instead of one dict operation per page.

Why: at a few hundred thousand resident pages each dict or OrderedDict insert of a fresh key cost
0.3-0.6 us on the project's VM (a cache miss or two, an allocation per OrderedDict node), so the
placement's bookkeeping of a 128-page set (residents, DRAM order, the LRU policy's order) took
~200 us, a third of the 8 MiB copy it accompanies. ``add_new`` of the same 128 keys is ~10 us.

Semantics (held to ``collections.OrderedDict`` by ``tests/native/test_native_key_order.py``):
- keys are exact ``str`` or ``int`` (TypeError on insert otherwise; a lookup of another type is a
  miss): their hash and equality run no Python code, so no call sees the map change under it.
  Keys match as in a dict (the same hash and equal), so equal-hash keys are told apart;
- assigning an existing key changes its value in place (its position stays), as in a dict;
- ``keys()``, ``values()``, ``items()`` and iteration are snapshots (lists), oldest first;
  ``newest(limit)`` the newest ``limit`` items, newest first;
- batch calls change all or nothing: ``add_new`` (every key new and distinct: appended in
  order), ``touch_many`` (every key present: each moved to the newest end, in order);
  ``contains_many``, ``any_in`` and ``values_of`` read; ``pop_oldest(amount)`` pops from the
  oldest end while ``amount`` is above 0, each value taken off it.

Memory: 32 bytes per entry plus 8-16 of index (``nbytes()``), and the key objects it keeps
alive. Every call holds the GIL (microseconds); not thread-safe beyond that (callers lock).
"""

from __future__ import annotations

from ._core import KeyOrder

__all__ = ["KeyOrder"]
