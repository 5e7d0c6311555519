"""The verbs enums (values of <infiniband/verbs.h>) with pyverbs' enum class names."""

import enum
import os

LAYOUTS = ("44", "50", "59", "current")
LAYOUT = os.environ.get("HICACHE_FAKE_PYVERBS_LAYOUT", "current")
if LAYOUT not in LAYOUTS:
    raise ImportError(f"HICACHE_FAKE_PYVERBS_LAYOUT must be one of {LAYOUTS}, not {LAYOUT!r}")


class ibv_access_flags(enum.IntFlag):  # noqa: N801 (pyverbs' names)
    IBV_ACCESS_LOCAL_WRITE = 1
    IBV_ACCESS_REMOTE_WRITE = 2
    IBV_ACCESS_REMOTE_READ = 4
    IBV_ACCESS_REMOTE_ATOMIC = 8
    IBV_ACCESS_MW_BIND = 16
    IBV_ACCESS_ZERO_BASED = 32
    IBV_ACCESS_ON_DEMAND = 64
    IBV_ACCESS_HUGETLB = 128
    IBV_ACCESS_RELAXED_ORDERING = 1 << 20


class ibv_qp_type(enum.IntEnum):  # noqa: N801
    IBV_QPT_RC = 2
    IBV_QPT_UC = 3
    IBV_QPT_UD = 4
    IBV_QPT_RAW_PACKET = 8
    IBV_QPT_XRC_SEND = 9
    IBV_QPT_XRC_RECV = 10
    IBV_QPT_DRIVER = 255


class ibv_qp_state(enum.IntEnum):  # noqa: N801
    IBV_QPS_RESET = 0
    IBV_QPS_INIT = 1
    IBV_QPS_RTR = 2
    IBV_QPS_RTS = 3
    IBV_QPS_SQD = 4
    IBV_QPS_SQE = 5
    IBV_QPS_ERR = 6
    IBV_QPS_UNKNOWN = 7


class ibv_qp_attr_mask(enum.IntFlag):  # noqa: N801
    IBV_QP_STATE = 1
    IBV_QP_CUR_STATE = 2
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 4
    IBV_QP_ACCESS_FLAGS = 8
    IBV_QP_PKEY_INDEX = 16
    IBV_QP_PORT = 32
    IBV_QP_QKEY = 64
    IBV_QP_AV = 128
    IBV_QP_PATH_MTU = 256
    IBV_QP_TIMEOUT = 512
    IBV_QP_RETRY_CNT = 1024
    IBV_QP_RNR_RETRY = 2048
    IBV_QP_RQ_PSN = 4096
    IBV_QP_MAX_QP_RD_ATOMIC = 8192
    IBV_QP_ALT_PATH = 16384
    IBV_QP_MIN_RNR_TIMER = 32768
    IBV_QP_SQ_PSN = 65536
    IBV_QP_MAX_DEST_RD_ATOMIC = 131072
    IBV_QP_PATH_MIG_STATE = 262144
    IBV_QP_CAP = 524288
    IBV_QP_DEST_QPN = 1048576
    IBV_QP_RATE_LIMIT = 33554432


class ibv_wr_opcode(enum.IntEnum):  # noqa: N801
    IBV_WR_RDMA_WRITE = 0
    IBV_WR_RDMA_WRITE_WITH_IMM = 1
    IBV_WR_SEND = 2
    IBV_WR_SEND_WITH_IMM = 3
    IBV_WR_RDMA_READ = 4
    IBV_WR_ATOMIC_CMP_AND_SWP = 5
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6
    IBV_WR_LOCAL_INV = 7
    IBV_WR_BIND_MW = 8
    IBV_WR_SEND_WITH_INV = 9
    IBV_WR_TSO = 10


class ibv_send_flags(enum.IntFlag):  # noqa: N801
    IBV_SEND_FENCE = 1
    IBV_SEND_SIGNALED = 2
    IBV_SEND_SOLICITED = 4
    IBV_SEND_INLINE = 8
    IBV_SEND_IP_CSUM = 16


class ibv_wc_status(enum.IntEnum):  # noqa: N801
    IBV_WC_SUCCESS = 0
    IBV_WC_LOC_LEN_ERR = 1
    IBV_WC_LOC_QP_OP_ERR = 2
    IBV_WC_LOC_EEC_OP_ERR = 3
    IBV_WC_LOC_PROT_ERR = 4
    IBV_WC_WR_FLUSH_ERR = 5
    IBV_WC_MW_BIND_ERR = 6
    IBV_WC_BAD_RESP_ERR = 7
    IBV_WC_LOC_ACCESS_ERR = 8
    IBV_WC_REM_INV_REQ_ERR = 9
    IBV_WC_REM_ACCESS_ERR = 10
    IBV_WC_REM_OP_ERR = 11
    IBV_WC_RETRY_EXC_ERR = 12
    IBV_WC_RNR_RETRY_EXC_ERR = 13
    IBV_WC_LOC_RDD_VIOL_ERR = 14
    IBV_WC_REM_INV_RD_REQ_ERR = 15
    IBV_WC_REM_ABORT_ERR = 16
    IBV_WC_INV_EECN_ERR = 17
    IBV_WC_INV_EEC_STATE_ERR = 18
    IBV_WC_FATAL_ERR = 19
    IBV_WC_RESP_TIMEOUT_ERR = 20
    IBV_WC_GENERAL_ERR = 21


class ibv_wc_opcode(enum.IntEnum):  # noqa: N801
    IBV_WC_SEND = 0
    IBV_WC_RDMA_WRITE = 1
    IBV_WC_RDMA_READ = 2
    IBV_WC_RECV = 128


class ibv_mtu(enum.IntEnum):  # noqa: N801
    IBV_MTU_256 = 1
    IBV_MTU_512 = 2
    IBV_MTU_1024 = 3
    IBV_MTU_2048 = 4
    IBV_MTU_4096 = 5


class ibv_port_state(enum.IntEnum):  # noqa: N801
    IBV_PORT_NOP = 0
    IBV_PORT_DOWN = 1
    IBV_PORT_INIT = 2
    IBV_PORT_ARMED = 3
    IBV_PORT_ACTIVE = 4
    IBV_PORT_ACTIVE_DEFER = 5


class ibv_gid_type_sysfs(enum.IntEnum):  # noqa: N801
    IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0
    IBV_GID_TYPE_SYSFS_ROCE_V2 = 1


class ibv_gid_type(enum.IntEnum):  # noqa: N801
    IBV_GID_TYPE_IB = 0
    IBV_GID_TYPE_ROCE_V1 = 1
    IBV_GID_TYPE_ROCE_V2 = 2


class ibv_node_type(enum.IntEnum):  # noqa: N801
    IBV_NODE_UNKNOWN = -1
    IBV_NODE_CA = 1
    IBV_NODE_RNIC = 4


class ibv_transport_type(enum.IntEnum):  # noqa: N801
    IBV_TRANSPORT_UNKNOWN = -1
    IBV_TRANSPORT_IB = 0
    IBV_TRANSPORT_IWARP = 1


# anonymous enums: module-level names in every layout
IBV_LINK_LAYER_UNSPECIFIED = 0
IBV_LINK_LAYER_INFINIBAND = 1
IBV_LINK_LAYER_ETHERNET = 2

ENUM_CLASSES = [
    ibv_access_flags,
    ibv_qp_type,
    ibv_qp_state,
    ibv_qp_attr_mask,
    ibv_wr_opcode,
    ibv_send_flags,
    ibv_wc_status,
    ibv_wc_opcode,
    ibv_mtu,
    ibv_port_state,
    ibv_gid_type_sysfs,
    ibv_gid_type,
    ibv_node_type,
    ibv_transport_type,
]
ANONYMOUS = {
    "IBV_LINK_LAYER_UNSPECIFIED": IBV_LINK_LAYER_UNSPECIFIED,
    "IBV_LINK_LAYER_INFINIBAND": IBV_LINK_LAYER_INFINIBAND,
    "IBV_LINK_LAYER_ETHERNET": IBV_LINK_LAYER_ETHERNET,
}


def export(namespace, member_names):
    """Put the enum classes (and, if ``member_names``, every member by name) into ``namespace``."""
    for cls in ENUM_CLASSES:
        namespace[cls.__name__] = cls
        if member_names:
            for m in cls:
                namespace[m.name] = m
    namespace.update(ANONYMOUS)
