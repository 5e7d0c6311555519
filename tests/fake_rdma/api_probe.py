"""Describe the pyverbs importable by this interpreter, as JSON on stdout: which of the names the
transport and the simulator rely on exist, the parameter names each callable documents (pyverbs
documents every parameter as ``:param name:``; Cython hides signatures), and what device-free
objects built exactly as ``transport/rdma/*.py`` builds them read back.

Run with the real pyverbs (``/usr/bin/python3`` on Debian with python3-pyverbs) and with the
stand-in (this folder first on ``sys.path``); ``test_rdma_sim_api.py`` compares the two.
"""

import inspect
import json
import re
import sys

# (module, class or None, attribute): what rdma/verbs / rdma/device / rdma/qp / the simulator use
NAMES = [
    ("device", None, "get_device_list"),
    ("device", "Context", "query_device"),
    ("device", "Context", "query_port"),
    ("device", "Context", "query_gid"),
    ("device", "Context", "query_gid_type"),
    ("device", "Context", "query_gid_table"),
    ("device", "Context", "close"),
    ("device", "Device", "name"),
    ("device", "DeviceAttr", "max_qp_wr"),
    ("device", "DeviceAttr", "max_sge"),
    ("device", "DeviceAttr", "max_sge_rd"),
    ("device", "DeviceAttr", "max_qp_rd_atom"),
    ("device", "DeviceAttr", "max_qp_init_rd_atom"),
    ("device", "DeviceAttr", "max_cqe"),
    ("device", "DeviceAttr", "max_mr_size"),
    ("device", "PortAttr", "state"),
    ("device", "PortAttr", "active_mtu"),
    ("device", "PortAttr", "lid"),
    ("device", "PortAttr", "link_layer"),
    ("device", "PortAttr", "gid_tbl_len"),
    ("device", "PortAttr", "max_msg_sz"),
    ("pd", "PD", "close"),
    ("mr", "MR", "lkey"),
    ("mr", "MR", "rkey"),
    ("mr", "MR", "close"),
    ("cq", "CQ", "poll"),
    ("cq", "CQ", "req_notify"),
    ("cq", "CQ", "ack_events"),
    ("cq", "CQ", "close"),
    ("cq", "CompChannel", "get_cq_event"),
    ("cq", "WC", "wr_id"),
    ("cq", "WC", "status"),
    ("qp", "QP", "to_init"),
    ("qp", "QP", "to_rtr"),
    ("qp", "QP", "to_rts"),
    ("qp", "QP", "modify"),
    ("qp", "QP", "query"),
    ("qp", "QP", "post_send"),
    ("qp", "QP", "qp_num"),
    ("qp", "QP", "qp_state"),
    ("qp", "QP", "close"),
    ("qp", "QPAttr", "ah_attr"),
    ("addr", "AH", "__init__"),
    ("wr", "SendWR", "set_wr_rdma"),
    ("pyverbs_error", "PyverbsError", "__init__"),
    ("pyverbs_error", "PyverbsRDMAError", "error_code"),
    ("pyverbs_error", "PyverbsUserError", "__init__"),
]
# callables whose documented parameters the stand-in's signature must list, in order
DOCUMENTED = [
    ("device", "Context", "query_port"),
    ("pd", "PD", "__init__"),
    ("mr", "MR", "__init__"),
    ("cq", "CQ", "__init__"),
    ("cq", "CQ", "poll"),
    ("cq", "CQ", "req_notify"),
    ("cq", "CQ", "ack_events"),
    ("cq", "CompChannel", "__init__"),
    ("cq", "CompChannel", "get_cq_event"),
    ("qp", "QPCap", "__init__"),
    ("qp", "QPInitAttr", "__init__"),
    ("qp", "QPAttr", "__init__"),
    ("qp", "QP", "__init__"),
    ("qp", "QP", "to_init"),
    ("qp", "QP", "to_rtr"),
    ("qp", "QP", "to_rts"),
    ("qp", "QP", "modify"),
    ("qp", "QP", "query"),
    ("qp", "QP", "post_send"),
    ("addr", "GlobalRoute", "__init__"),
    ("addr", "AHAttr", "__init__"),
    ("wr", "SGE", "__init__"),
    ("wr", "SendWR", "__init__"),
    ("wr", "SendWR", "set_wr_rdma"),
]


def _mod(name):
    return __import__(f"pyverbs.{name}", fromlist=["x"])


def _doc_params(obj):
    return re.findall(r":param (\w+):", inspect.getdoc(obj) or "")


def _sig_params(obj):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in sig.parameters.values() if p.kind in kinds and p.name != "self"]


def _constructions():
    """Device-free objects, built with the keywords the transport uses; what they read back."""
    import pyverbs.addr as addr
    import pyverbs.qp as qp
    import pyverbs.wr as wr

    out = {}
    gid = addr.GID("0000:0000:0000:0000:0000:ffff:0a00:0001")
    out["gid"] = str(gid)
    gr = addr.GlobalRoute(dgid=gid, sgid_index=3, hop_limit=64, traffic_class=106)
    ah = addr.AHAttr(dlid=0, sl=3, is_global=1, port_num=1, gr=gr)
    attr = qp.QPAttr(port_num=1, path_mtu=5)
    attr.ah_attr = ah
    for name, value in [
        ("pkey_index", 0),
        ("qp_access_flags", 7),
        ("path_mtu", 5),
        ("dest_qp_num", 0x1234),
        ("rq_psn", 9),
        ("max_dest_rd_atomic", 4),
        ("min_rnr_timer", 12),
        ("timeout", 14),
        ("retry_cnt", 7),
        ("rnr_retry", 7),
        ("sq_psn", 11),
        ("max_rd_atomic", 4),
    ]:
        setattr(attr, name, value)
        out[f"qpattr.{name}"] = getattr(attr, name)
    back = attr.ah_attr
    out["ah"] = [back.dgid, back.sgid_index, back.hop_limit, back.traffic_class, back.sl, back.is_global]
    err_attr = qp.QPAttr(qp_state=6)
    out["qpattr.qp_state"] = int(err_attr.qp_state)
    cap = qp.QPCap(max_send_wr=64, max_recv_wr=1, max_send_sge=4, max_recv_sge=1)
    init = qp.QPInitAttr(qp_type=2, scq=None, rcq=None, cap=cap, sq_sig_all=0)
    out["init"] = [init.qp_type, init.sq_sig_all, init.max_send_wr, init.max_send_sge]
    sge = wr.SGE(0x1000, 64, 5)
    out["sge"] = [sge.addr, sge.length, sge.lkey]
    tail = wr.SendWR(wr_id=2, opcode=4, num_sge=1, sg=[sge], send_flags=2)
    head = wr.SendWR(wr_id=1, opcode=0, num_sge=1, sg=[sge], send_flags=0, next_wr=tail)
    head.set_wr_rdma(77, 0x2000)
    out["sendwr"] = [head.wr_id, head.opcode, head.num_sge, head.send_flags, tail.send_flags]
    for label, fn in [
        ("sendwr_no_sge", lambda: wr.SendWR(wr_id=1, opcode=4, num_sge=0, sg=None)),
        ("next_wr_read_back", lambda: head.next_wr),
    ]:
        try:
            fn()
            out[label] = "ok"
        except Exception as exc:
            out[label] = f"{type(exc).__name__}: {exc}"
    return out


ENUM_NAMES = {
    "ibv_access_flags": ["IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ"],
    "ibv_qp_type": ["IBV_QPT_RC"],
    "ibv_qp_state": ["IBV_QPS_RESET", "IBV_QPS_INIT", "IBV_QPS_RTR", "IBV_QPS_RTS", "IBV_QPS_ERR"],
    "ibv_qp_attr_mask": ["IBV_QP_STATE", "IBV_QP_ACCESS_FLAGS", "IBV_QP_AV", "IBV_QP_MAX_QP_RD_ATOMIC"],
    "ibv_wr_opcode": ["IBV_WR_RDMA_WRITE", "IBV_WR_RDMA_READ"],
    "ibv_send_flags": ["IBV_SEND_SIGNALED", "IBV_SEND_FENCE"],
    "ibv_wc_status": [
        "IBV_WC_SUCCESS",
        "IBV_WC_WR_FLUSH_ERR",
        "IBV_WC_RETRY_EXC_ERR",
        "IBV_WC_REM_ACCESS_ERR",
    ],
    "ibv_mtu": ["IBV_MTU_1024", "IBV_MTU_4096"],
    "ibv_port_state": ["IBV_PORT_ACTIVE"],
    "ibv_gid_type_sysfs": ["IBV_GID_TYPE_SYSFS_IB_ROCE_V1", "IBV_GID_TYPE_SYSFS_ROCE_V2"],
    "": ["IBV_LINK_LAYER_INFINIBAND", "IBV_LINK_LAYER_ETHERNET"],
}


def _enums():
    """Where the enums live and their values (module-level name, else enum-class member)."""
    for module in ("pyverbs.libibverbs_enums", "pyverbs.enums"):
        try:
            mod = __import__(module, fromlist=["x"])
        except ImportError:
            continue
        values = {}
        for cls, names in ENUM_NAMES.items():
            for name in names:
                v = getattr(mod, name, None)
                if v is None and cls:
                    v = getattr(getattr(mod, cls, None), name, None)
                if v is not None:
                    values[name] = int(v)
        if len(values) == sum(len(n) for n in ENUM_NAMES.values()):
            return module, values
    return None, {}


def main():
    report = {"pyverbs": __import__("pyverbs").__file__, "names": {}, "params": {}}
    report["enums_module"], report["enums"] = _enums()
    for module, cls, attr in NAMES:
        obj = _mod(module)
        ok = True
        if cls is not None:
            obj = getattr(obj, cls, None)
            ok = obj is not None
        report["names"][f"{module}.{cls}.{attr}"] = ok and hasattr(obj, attr)
    for module, cls, attr in DOCUMENTED:
        obj = getattr(getattr(_mod(module), cls), attr)
        sig = _sig_params(obj)
        try:
            var_kw = any(
                p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(obj).parameters.values()
            )
        except (TypeError, ValueError):
            var_kw = False
        report["params"][f"{module}.{cls}.{attr}"] = {"doc": _doc_params(obj), "sig": sig, "var_kw": var_kw}
    report["constructions"] = _constructions()
    json.dump(report, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
