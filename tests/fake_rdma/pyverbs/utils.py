"""GID text helpers with pyverbs.utils' names and formats."""

from .pyverbs_error import PyverbsUserError


def gid_str(subnet_prefix, interface_id):
    h = f"{subnet_prefix:016x}{interface_id:016x}"
    return ":".join(h[i : i + 4] for i in range(0, 32, 4))


def gid_str_to_array(val):
    parts = val.split(":")
    if len(parts) != 8 or any(len(p) != 4 for p in parts):
        raise PyverbsUserError(f"Invalid GID value ({parts})")
    int("".join(parts), 16)
    out = []
    for p in parts:
        out += [p[0:2], p[2:4]]
    return out


def gid_bytes(val):
    """16 raw bytes of a GID given in pyverbs' text form."""
    return bytes(int(b, 16) for b in gid_str_to_array(val))


def gid_text(raw):
    h = bytes(raw).hex()
    return ":".join(h[i : i + 4] for i in range(0, 32, 4))
