"""Map ibverbs work-completion statuses to outcomes (pure): which ones mean the peer is gone
(drop the QP, mark the node down), which only fail the items of the batch."""

from __future__ import annotations

import enum


class WcStatus(enum.IntEnum):
    """``enum ibv_wc_status`` (libibverbs verbs.h)."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21


class Outcome(enum.Enum):
    OK = "ok"
    ITEM_FAILED = "item_failed"  # this request was bad (bounds, keys): fail its item, keep the QP
    PEER_DOWN = "peer_down"  # the connection is unusable: fail all, reconnect later


_PEER_DOWN = {
    WcStatus.RETRY_EXC_ERR,
    WcStatus.RNR_RETRY_EXC_ERR,
    WcStatus.FATAL_ERR,
    WcStatus.RESP_TIMEOUT_ERR,
    WcStatus.REM_ABORT_ERR,
    WcStatus.BAD_RESP_ERR,
    WcStatus.GENERAL_ERR,
}


def classify(status: int) -> Outcome:
    if status == WcStatus.SUCCESS:
        return Outcome.OK
    try:
        st = WcStatus(status)
    except ValueError:
        return Outcome.PEER_DOWN
    if st in _PEER_DOWN:
        return Outcome.PEER_DOWN
    # any error moves an RC QP to the error state; later WRs complete with WR_FLUSH_ERR
    if st == WcStatus.WR_FLUSH_ERR:
        return Outcome.PEER_DOWN
    return Outcome.ITEM_FAILED


def describe(status: int) -> str:
    try:
        return WcStatus(status).name
    except ValueError:
        return f"UNKNOWN({status})"
