"""Map ibverbs work-completion statuses to outcomes (pure): whether the peer is unreachable (back
off before reconnecting), refused the request, or our own side failed."""

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
    """What a failed completion says about the connection. Any error moves an RC QP to the error
    state (its later work requests complete with WR_FLUSH_ERR), so every outcome but OK tears the
    QP down; they differ in what the next call should do."""

    OK = "ok"
    UNREACHABLE = "unreachable"  # the peer did not answer (retries exhausted): reconnect with back-off
    REJECTED = "rejected"  # the peer refused the request (keys, bounds, access): reconnect now
    LOCAL = "local"  # our own side failed (local protection/length, flushed): reconnect now


_UNREACHABLE = {
    WcStatus.RETRY_EXC_ERR,
    WcStatus.RNR_RETRY_EXC_ERR,
    WcStatus.RESP_TIMEOUT_ERR,
    WcStatus.FATAL_ERR,
    WcStatus.GENERAL_ERR,
}
_REJECTED = {
    WcStatus.REM_ACCESS_ERR,
    WcStatus.REM_INV_REQ_ERR,
    WcStatus.REM_OP_ERR,
    WcStatus.REM_ABORT_ERR,
    WcStatus.REM_INV_RD_REQ_ERR,
    WcStatus.BAD_RESP_ERR,
}


def classify(status: int) -> Outcome:
    if status == WcStatus.SUCCESS:
        return Outcome.OK
    try:
        st = WcStatus(status)
    except ValueError:
        return Outcome.UNREACHABLE
    if st in _UNREACHABLE:
        return Outcome.UNREACHABLE
    if st in _REJECTED:
        return Outcome.REJECTED
    return Outcome.LOCAL


def describe(status: int) -> str:
    try:
        return WcStatus(status).name
    except ValueError:
        return f"UNKNOWN({status})"
