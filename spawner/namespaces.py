"""Linux namespace calls for a server's sandbox: ``setns``, ``unshare`` and ``mount`` through
libc (Python 3.11's ``os`` has none of them), the private mounts a server gets, and a listening
socket made inside another network namespace.

The private mounts are planned by :func:`private_mounts` (pure) and made by
:func:`enter_private_mounts` in the server's ``preexec_fn``, as root, before it becomes the
student. Why: docs/design-notes.md, scalelab.spawner.sandbox.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

#: ``clone(2)`` flags of the namespaces used here.
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
#: ``mount(2)`` flags used here.
MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
#: Folders every program may write temporary files to; each is the server's own in its sandbox.
SHARED_TMP = ("/tmp", "/var/tmp")
#: POSIX shared memory (multiprocessing, PyTorch's DataLoader): a fresh tmpfs per server, whose
#: pages count against the server's cgroup memory limit.
SHM = "/dev/shm"

_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceError(OSError):
    """A namespace call failed; ``errno`` is the kernel's, the message names the call."""


@dataclass(frozen=True)
class Mount:
    """One ``mount(2)`` call: ``source`` on ``target`` (``fstype`` None for a bind)."""

    source: str
    target: str
    fstype: str | None = None
    flags: int = 0
    data: str | None = None


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise NamespaceError(code, f"{what}: {os.strerror(code)}")


def setns(path: str, nstype: int) -> None:
    """Move the calling thread into the namespace at ``path`` (e.g. ``/run/netns/<name>``).

    Raises
    ------
    NamespaceError
        ``setns(2)`` failed (e.g. EPERM: not root; ENOENT from ``open``: no such namespace).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, nstype), f"setns({path})")
    finally:
        os.close(fd)


def unshare(flags: int) -> None:
    """Give the calling process new namespaces of the kinds in ``flags`` (``unshare(2)``).

    Raises
    ------
    NamespaceError
        The kernel refused (EPERM: not root).
    """
    _check(_libc.unshare(flags), "unshare")


def mount(op: Mount) -> None:
    """Make the mount ``op`` describes (``mount(2)``).

    Raises
    ------
    NamespaceError
        The kernel refused; the message names the target.
    """
    data = op.data.encode() if op.data is not None else None
    fstype = op.fstype.encode() if op.fstype is not None else None
    result = _libc.mount(op.source.encode(), op.target.encode(), fstype, op.flags, data)
    _check(result, f"mount {op.source} on {op.target}")


def private_mounts(private_tmp: str, keep: Iterable[str]) -> list[Mount]:
    """The mounts that give a server its own temporary folders, in the order to make them (pure).

    ``private_tmp`` (the server's ``<runtime folder>/tmp``) is bound over each of
    :data:`SHARED_TMP`, and a fresh tmpfs mounted on :data:`SHM`. A folder of ``keep`` (what
    the hub hands the server: its runtime folder, the store, kernelspecs, its home) that lies
    under one of them (e.g. ``/tmp/scalelab-runtime-...``, a trial's state folder) would be
    hidden by that bind, so it is first bound at the same place inside ``private_tmp`` and
    carried along (``MS_REC``): the server finds it at its usual path. The caller makes those
    mount points (:func:`kept_mount_points`) before the server starts.
    """
    ops = [Mount("none", "/", flags=MS_REC | MS_PRIVATE)]
    ops += [
        Mount(path, point, flags=MS_BIND) for path, point in kept_mount_points(private_tmp, keep)
    ]
    ops += [Mount(private_tmp, shared, flags=MS_BIND | MS_REC) for shared in SHARED_TMP]
    ops.append(Mount("tmpfs", SHM, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"))
    return ops


def kept_mount_points(private_tmp: str, keep: Iterable[str]) -> list[tuple[str, str]]:
    """``(folder, mount point)`` for each folder of ``keep`` under a shared temporary folder:
    where inside ``private_tmp`` it is bound to stay at its path once ``private_tmp`` covers
    that folder (pure). A folder inside another kept one is carried with it; ``private_tmp``
    itself and folders inside it need nothing."""
    private = PurePosixPath(private_tmp)
    paths = sorted({PurePosixPath(path) for path in keep if path})
    points: list[tuple[str, str]] = []
    kept: list[PurePosixPath] = []
    for path in paths:
        if path == private or private in path.parents:
            continue
        if any(parent == path or parent in path.parents for parent in kept):
            continue
        for shared in map(PurePosixPath, SHARED_TMP):
            if shared in path.parents:
                kept.append(path)
                points.append((str(path), str(private / path.relative_to(shared))))
    return points


def enter_private_mounts(ops: list[Mount]) -> None:
    """Give the calling process a mount namespace of its own and make ``ops`` in it (from
    :func:`private_mounts`). Called in a server's ``preexec_fn``, as root.

    Raises
    ------
    NamespaceError
        A call was refused.
    """
    unshare(CLONE_NEWNS)
    for op in ops:
        if op.fstype is None and op.target in SHARED_TMP and not os.path.isdir(op.target):
            continue  # a host without /var/tmp
        mount(op)


def listen_in(netns_path: str, host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` inside the network namespace at ``netns_path``.

    A socket belongs to the namespace it was made in, whichever thread uses it later: it is
    made in a short-lived thread that enters the namespace (``setns`` moves only the calling
    thread), so the caller's own namespace is never changed.

    Raises
    ------
    NamespaceError
        The namespace cannot be entered.
    OSError
        The address is taken or missing inside it.
    """
    made: dict[str, object] = {}

    def run() -> None:
        try:
            setns(netns_path, CLONE_NEWNET)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(128)
            except OSError:
                sock.close()
                raise
            made["socket"] = sock
        except OSError as exc:
            made["error"] = exc

    thread = threading.Thread(target=run, name="scalelab-listen-in", daemon=True)
    thread.start()
    thread.join()
    if "error" in made:
        raise made["error"]  # type: ignore[misc]
    return made["socket"]  # type: ignore[return-value]
