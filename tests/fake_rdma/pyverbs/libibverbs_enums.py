"""``pyverbs.libibverbs_enums``: absent in layout 44, empty in 50 (rdma-core 50-58), the enums from
59 on: with module-level names when built with Cython < 3.1 (59), as class members only with
Cython >= 3.1 (current)."""

from ._enums_def import LAYOUT, export

if LAYOUT == "44":
    raise ModuleNotFoundError("No module named 'pyverbs.libibverbs_enums'", name="pyverbs.libibverbs_enums")
if LAYOUT in ("59", "current"):
    export(globals(), member_names=LAYOUT == "59")
