"""A full disk, told as such: which disk, how much room it has, how much more is needed.

A write that fails on a full disk (``ENOSPC``) or a full quota (``EDQUOT``) must not be reported
as an unreadable store, a bug or an unreachable server. :func:`is_disk_full` recognises it,
through wrapped exceptions too; :func:`full_disk_message` says it in one line for a person.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3

#: ``errno`` values that mean "no room left": a full disk, a full quota.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: How far :func:`is_disk_full` follows ``__cause__`` / ``__context__``.
_CHAIN_LIMIT = 10


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception in its ``__cause__`` / ``__context__`` chain, says the
    disk or the quota is full (pure): :func:`disk_full_error` is not None."""
    return disk_full_error(exc) is not None


def disk_full_error(exc: BaseException | None) -> BaseException | None:
    """The exception in ``exc``'s chain (``exc`` itself, its ``__cause__`` / ``__context__``)
    that says the disk or the quota is full, else None (pure).

    That is an ``OSError`` with ``errno`` ENOSPC or EDQUOT (its ``filename``, when set, is the
    file being written), or SQLite's ``sqlite3.OperationalError`` "database or disk is full"
    (``SQLITE_FULL``), which carries no errno. The chain is followed at most 10 links deep;
    None gives None.
    """
    seen = 0
    while exc is not None and seen < _CHAIN_LIMIT:
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return exc
        if isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc).lower():
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def mount_point(path: str | os.PathLike[str]) -> str:
    """The mount point (absolute path) of the file system holding ``path``.

    ``path`` need not exist: its nearest existing parent is used. Reads the file system only
    (``os.path.ismount`` on each parent); never raises for a path that is missing.
    """
    current = os.path.abspath(os.fspath(path))
    while not os.path.exists(current) and os.path.dirname(current) != current:
        current = os.path.dirname(current)
    while not os.path.ismount(current):
        current = os.path.dirname(current)
    return current


def format_bytes(count: int) -> str:
    """``count`` bytes as a short size for people: ``"512 B"``, ``"340 KiB"``, ``"1.2 MiB"``,
    ``"12 MiB"``, ``"2.0 GiB"`` (binary units; KiB and MiB rounded up, so a size is never shown
    as less than it is; one decimal below 10 MiB)."""
    if count < 1024:
        return f"{count} B"
    if count < 1024**2:
        return f"{-(-count // 1024)} KiB"
    if count < 10 * 1024**2:
        return f"{-(-count * 10 // 1024**2) / 10:.1f} MiB"
    if count < 1024**3:
        return f"{-(-count // 1024**2)} MiB"
    return f"{count / 1024**3:.1f} GiB"


def full_disk_message(path: str | os.PathLike[str], needed_bytes: int | None = None) -> str:
    """One line telling a person that the disk holding ``path`` is full, and what to do.

    Parameters
    ----------
    path
        The file or folder being written (it need not exist).
    needed_bytes
        How many bytes the write needs in all, when known; the message then says how many more
        than the free space that is (or the whole amount when the free space is unknown).

    Returns
    -------
    str
        E.g. "The disk holding /srv/x (mount /srv, 12 MiB free of 2.0 GiB) is full: this needs
        340 MiB more. Free space there, or ask the operators for a bigger disk or quota." Free
        and total space come from ``shutil.disk_usage`` on the mount point; when that fails the
        message names the disk without them. A full quota shows as "full" too, with the disk's
        own (larger) free space.
    """
    shown = os.fspath(path)
    mount = mount_point(path)
    try:
        usage = shutil.disk_usage(mount)
    except OSError:
        where, free = f"mount {mount}", None
    else:
        free = usage.free
        where = f"mount {mount}, {format_bytes(usage.free)} free of {format_bytes(usage.total)}"
    need = ""
    if needed_bytes is not None and needed_bytes > 0:
        more = needed_bytes if free is None else needed_bytes - free
        if more > 0:
            need = f" this needs {format_bytes(more)} more ({format_bytes(needed_bytes)} in all)."
        else:
            need = f" this needs {format_bytes(needed_bytes)} in all (a quota may be the limit)."
    return (
        f"The disk holding {shown} ({where}) is full:{need or ' no room left.'} "
        "Free space there, or ask the operators for a bigger disk or quota."
    )
