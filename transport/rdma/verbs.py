"""pyverbs, imported lazily, across rdma-core releases (44, Debian 12, through current).

rdma-core up to 58 ships the verbs enums as ``pyverbs.enums`` with module-level names; from 59
on they live in ``pyverbs.libibverbs_enums`` (``pyverbs.enums`` is gone), and pyverbs built with
Cython >= 3.1 exposes named enums only as members of their enum class
(``ibv_access_flags.IBV_ACCESS_LOCAL_WRITE``). ``load()`` resolves every constant this package
uses from whichever layout is installed, once, and raises ``ImportError`` naming what is missing.

Nothing here touches a device: ``device_names()`` lists devices, the rest is done by
``device``.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# enum class -> the members we use (anonymous enums, e.g. the link layers, are module-level only)
_ENUMS: dict[str, tuple[str, ...]] = {
    "ibv_access_flags": ("IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ"),
    "ibv_qp_type": ("IBV_QPT_RC",),
    "ibv_qp_state": ("IBV_QPS_RESET", "IBV_QPS_INIT", "IBV_QPS_RTR", "IBV_QPS_RTS", "IBV_QPS_ERR"),
    "ibv_qp_attr_mask": ("IBV_QP_STATE",),
    "ibv_wr_opcode": ("IBV_WR_RDMA_WRITE", "IBV_WR_RDMA_READ"),
    "ibv_send_flags": ("IBV_SEND_SIGNALED",),
    "ibv_wc_status": ("IBV_WC_SUCCESS", "IBV_WC_WR_FLUSH_ERR"),
    "ibv_mtu": ("IBV_MTU_256", "IBV_MTU_512", "IBV_MTU_1024", "IBV_MTU_2048", "IBV_MTU_4096"),
    "ibv_port_state": ("IBV_PORT_ACTIVE",),
    "ibv_gid_type_sysfs": ("IBV_GID_TYPE_SYSFS_IB_ROCE_V1", "IBV_GID_TYPE_SYSFS_ROCE_V2"),
    "": ("IBV_LINK_LAYER_INFINIBAND", "IBV_LINK_LAYER_ETHERNET"),
}
_ENUM_MODULES = ("pyverbs.libibverbs_enums", "pyverbs.enums")


@dataclass(frozen=True)
class Verbs:
    """The pyverbs modules and the resolved constants (``e["IBV_QPT_RC"]``)."""

    addr: ModuleType
    cq: ModuleType
    device: ModuleType
    mr: ModuleType
    pd: ModuleType
    qp: ModuleType
    wr: ModuleType
    error: type[BaseException]  # pyverbs' base exception, PyverbsError
    e: dict[str, int]
    enums_module: str


_lock = threading.Lock()
_loaded: Verbs | None = None


def _lookup(mod: ModuleType, enum_class: str, name: str) -> int | None:
    value = getattr(mod, name, None)
    if value is None and enum_class:
        value = getattr(getattr(mod, enum_class, None), name, None)
    return None if value is None else int(value)


def _resolve_enums() -> tuple[dict[str, int], str]:
    missing: list[str] = []
    tried: list[str] = []
    for module_name in _ENUM_MODULES:
        try:
            mod = importlib.import_module(module_name)
        except ImportError as exc:
            tried.append(f"{module_name}: {exc}")
            continue
        found: dict[str, int] = {}
        missing = []
        for enum_class, names in _ENUMS.items():
            for name in names:
                value = _lookup(mod, enum_class, name)
                if value is None:
                    missing.append(name)
                else:
                    found[name] = value
        if not missing:
            return found, module_name
        # rdma-core 50-58 ship an empty libibverbs_enums next to the real pyverbs.enums
        tried.append(f"{module_name}: lacks {', '.join(missing[:3])}...")
    raise ImportError("pyverbs enums not found (" + "; ".join(tried) + ")")


def load() -> Verbs:
    """Import pyverbs (once); ``ImportError`` with the reason when it is missing or too old."""
    global _loaded
    with _lock:
        if _loaded is None:
            mods = {n: importlib.import_module(f"pyverbs.{n}") for n in ("addr", "cq", "device", "mr", "pd")}
            mods |= {n: importlib.import_module(f"pyverbs.{n}") for n in ("qp", "wr")}
            error = importlib.import_module("pyverbs.pyverbs_error").PyverbsError
            enums, module_name = _resolve_enums()
            _loaded = Verbs(error=error, e=enums, enums_module=module_name, **mods)
        return _loaded


def reset_for_tests() -> None:
    """Forget the loaded modules (tests switch between simulated pyverbs layouts)."""
    global _loaded
    with _lock:
        _loaded = None


def device_names(v: Verbs) -> list[str]:
    """Names of the RDMA devices libibverbs sees (``[]`` when none)."""
    names = []
    for dev in v.device.get_device_list():
        name: Any = dev.name
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def unavailable_reason(device: str = "") -> str | None:
    """``None`` when pyverbs imports and ``device`` (or, empty, any device) exists, else why not."""
    try:
        v = load()
    except ImportError as exc:
        return (
            f"pyverbs is not importable ({exc}); install rdma-core's python3-pyverbs "
            "(or pip install pyverbs) matching the host's rdma-core"
        )
    try:
        names = device_names(v)
    except v.error as exc:
        return f"cannot list RDMA devices: {exc}"
    if not names:
        return "no RDMA device (libibverbs lists none: no NIC, driver or rdma_rxe link)"
    if device and device != "auto" and device not in names:
        return f"RDMA device {device!r} not found (have {', '.join(names)})"
    return None
