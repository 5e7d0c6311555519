"""``pyverbs.enums``: present up to rdma-core 58 (layouts 44 and 50), with module-level names."""

from ._enums_def import LAYOUT, export

if LAYOUT not in ("44", "50"):
    raise ModuleNotFoundError("No module named 'pyverbs.enums'", name="pyverbs.enums")
export(globals(), member_names=True)
