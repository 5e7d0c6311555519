"""placeholder"""


def rdma_unavailable_reason() -> str | None:
    return "not implemented yet"
