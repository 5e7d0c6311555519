"""Directories and files only the serving user can touch (other local users are not trusted).

Region files hold KV pages (prompts can be rebuilt from them), and a store another user planted
would be served as ours. So, for every directory the engine keeps files in:

* it is created 0700 (files 0600, see :data:`FILE_MODE`), and checked after creation with
  ``lstat`` (a link or a directory someone else made first is seen, not followed);
* it must be owned by the effective user and not writable by group or others, and its parent
  must not let others swap it (writable by others only with the sticky bit, as /var/tmp);
  otherwise :class:`SsdUnsafePathError` names the directory, its owner and mode, and the fix;
* every entry in it is checked at attach: a symbolic link is refused (never followed out of the
  directory), an entry another user owns is refused, and our own entries with group or other
  permission bits (stores written before this rule: 0644 files, 0755 directories) are tightened
  to 0600/0700 so existing stores keep opening and stop being readable by others.

A symbolic link as the directory itself is accepted only when the link belongs to us or to root
and its target passes the same checks (an operator pointing the path at another disk).
Files are opened with :data:`O_NOFOLLOW` everywhere in the engine.
"""

from __future__ import annotations

import os
import pwd
import stat

from .errors import SsdError

DIR_MODE = 0o700
FILE_MODE = 0o600
O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_OTHERS = 0o077  # group and other permission bits: none on our files
_OTHERS_WRITE = 0o022


class SsdUnsafePathError(SsdError):
    """A directory or file of the engine is owned by another user, writable by others, or a link."""


def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _me() -> str:
    return _owner(os.geteuid())


def check_dir(path: str, what: str) -> None:
    """Refuse (:class:`SsdUnsafePathError`) a directory that another user owns or others may write
    into; ``what`` names the setting in the message (e.g. ``tiers.ssd.path``)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise SsdUnsafePathError(f"{what}: {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid not in (os.geteuid(), 0):
            raise SsdUnsafePathError(
                f"{what}: {path} is a symbolic link owned by {_owner(st.st_uid)}, not by the serving "
                f"user {_me()} or root: another user could point it at a store of theirs. Remove it, "
                f"or choose another {what}"
            )
        try:
            st = os.stat(path)
        except OSError as exc:
            raise SsdUnsafePathError(f"{what}: {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SsdUnsafePathError(f"{what}: {path} is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        raise SsdUnsafePathError(
            f"{what}: {path} belongs to {_owner(st.st_uid)} (mode {mode:04o}), not to the serving "
            f"user {_me()}: a directory another user controls could hold a store they planted. "
            f"Run `chown {os.geteuid()} {path} && chmod 700 {path}` if it is yours, or choose "
            f"another {what}"
        )
    if mode & _OTHERS_WRITE:
        raise SsdUnsafePathError(
            f"{what}: {path} is writable by group or others (mode {mode:04o}): another user could "
            f"plant or swap files in it. Run `chmod 700 {path}`, or choose another {what}"
        )
    parent = os.path.dirname(os.path.abspath(path))
    try:
        pst = os.stat(parent)
    except OSError as exc:
        raise SsdUnsafePathError(f"{what}: {parent} (above {path}): {exc.strerror or exc}") from None
    if pst.st_mode & _OTHERS_WRITE and not pst.st_mode & stat.S_ISVTX:
        raise SsdUnsafePathError(
            f"{what}: {parent} (above {path}) is writable by others and not sticky (mode "
            f"{stat.S_IMODE(pst.st_mode):04o}): another user could swap {path} for a directory of "
            f"theirs. Run `chmod +t {parent}` or `chmod go-w {parent}`, or choose another {what}"
        )


def make_private_dir(path: str, what: str) -> None:
    """Create ``path`` (missing parents too) 0700 unless it exists, then :func:`check_dir` it."""
    try:
        os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    except OSError as exc:
        raise SsdUnsafePathError(f"{what}: cannot create {path}: {exc.strerror or exc}") from None
    check_dir(path, what)


def inspect_entries(directory: str) -> list[tuple[str, str, str]]:
    """Read-only check of an engine directory's entries: ``(path, kind, reason)`` for each that
    is a symbolic link (``link``), belongs to another user (``foreign``) or has group or other
    permission bits (``loose``). Links are never followed."""
    me = os.geteuid()
    out: list[tuple[str, str, str]] = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            out.append((path, "link", f"{path} is a symbolic link (to {target!r})"))
        elif st.st_uid != me:
            out.append((path, "foreign", f"{path} belongs to {_owner(st.st_uid)}, not to {_me()}"))
        elif stat.S_IMODE(st.st_mode) & _OTHERS:
            out.append(
                (path, "loose", f"{path} is mode {stat.S_IMODE(st.st_mode):04o} (group or others may use it)")
            )
    return out


def secure_entries(directory: str, what: str) -> None:
    """Check every entry of an engine directory (module docstring): refuse links and entries of
    another owner; tighten our own to 0600 (files) / 0700 (directories), and the directory
    itself to 0700. Call after :func:`check_dir`."""
    try:
        os.chmod(directory, DIR_MODE)
    except OSError as exc:
        raise SsdUnsafePathError(f"{what}: cannot chmod 700 {directory}: {exc.strerror or exc}") from None
    for path, kind, reason in inspect_entries(directory):
        if kind == "link":
            raise SsdUnsafePathError(
                f"{what}: {reason}; the engine never follows links out of its directory. Remove it"
            )
        if kind == "foreign":
            raise SsdUnsafePathError(
                f"{what}: {reason}, the serving user: it could be a file another user planted. "
                f"Remove it, or `chown {os.geteuid()} {path}` if it is ours"
            )
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        _tighten(path, stat.S_IMODE(st.st_mode) & (DIR_MODE if stat.S_ISDIR(st.st_mode) else FILE_MODE))


def _tighten(path: str, mode: int) -> None:
    """chmod an entry we own through an ``O_NOFOLLOW`` descriptor (no link is followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:  # gone since the listing (a probe file of another engine)
        return
    except PermissionError:  # ours but not readable: the directory is private, chmod the path
        os.chmod(path, mode)
        return
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
