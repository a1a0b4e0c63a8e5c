"""A Linux control group (cgroup) per local single-user server: its limits, and its end.

:class:`ServerCgroup` makes ``<parent>/<name>`` in each hierarchy the kernel offers (cgroup v2's
one, or v1's ``memory``, ``cpu`` and ``pids``), writes the limits (:func:`v1_settings`,
:func:`v2_settings`), lets the server's process join it before it runs anything
(:meth:`ServerCgroup.join`, from the spawner's ``preexec_fn``), and at the end kills whatever
is still in it and removes it (:meth:`ServerCgroup.end`). Why: docs/design-notes.md,
scalelab.spawner.cgroups.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: Where the kernel's cgroup file systems are mounted.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: cgroup v1 controllers a server's cgroup is made in.
V1_CONTROLLERS = ("memory", "cpu", "pids")
#: The CFS period of a CPU limit, in microseconds (the kernel's default, 100 ms).
CPU_PERIOD_US = 100_000
#: Seconds :meth:`ServerCgroup.end` keeps killing and waiting for the cgroup to empty.
END_TIMEOUT_S = 10.0


class CgroupError(RuntimeError):
    """A cgroup cannot be made, limited or joined; the message names the file and the fix."""


@dataclass(frozen=True)
class Limits:
    """What a server and everything it starts may use together.

    Attributes
    ----------
    memory_bytes
        Resident memory in bytes (``c.Spawner.mem_limit``), or None for no limit.
    cpus
        CPU time as a number of CPUs, e.g. 2.0 (``c.Spawner.cpu_limit``), or None.
    tasks
        Processes and threads together (``pids.max``), or None.
    """

    memory_bytes: int | None = None
    cpus: float | None = None
    tasks: int | None = None


def cpu_quota_us(cpus: float) -> int:
    """The CFS quota per :data:`CPU_PERIOD_US` for ``cpus`` CPUs, in microseconds (at least the
    kernel's minimum, 1000) (pure)."""
    return max(1000, round(cpus * CPU_PERIOD_US))


def v1_settings(limits: Limits) -> dict[tuple[str, str], str]:
    """The files to write in a v1 server cgroup: ``(controller, file) -> value`` (pure).

    The memory limit goes into ``memory.limit_in_bytes`` (and, by :meth:`ServerCgroup.create`,
    ``memory.memsw.limit_in_bytes`` where swap is accounted: the same figure, so swap is no way
    around it); the CPU limit into ``cpu.cfs_period_us`` and ``cpu.cfs_quota_us``; tasks into
    ``pids.max``. Source: the kernel's Documentation/admin-guide/cgroup-v1/.
    """
    out: dict[tuple[str, str], str] = {}
    if limits.memory_bytes is not None:
        out[("memory", "memory.limit_in_bytes")] = str(limits.memory_bytes)
    if limits.cpus is not None:
        out[("cpu", "cpu.cfs_period_us")] = str(CPU_PERIOD_US)
        out[("cpu", "cpu.cfs_quota_us")] = str(cpu_quota_us(limits.cpus))
    if limits.tasks is not None:
        out[("pids", "pids.max")] = str(limits.tasks)
    return out


def v2_settings(limits: Limits) -> dict[str, str]:
    """The files to write in a v2 server cgroup: ``file -> value`` (pure): ``memory.max``
    (with ``memory.swap.max`` 0: no swap beyond it), ``cpu.max`` (``"<quota> <period>"``) and
    ``pids.max``. Source: the kernel's Documentation/admin-guide/cgroup-v2.rst."""
    out: dict[str, str] = {}
    if limits.memory_bytes is not None:
        out["memory.max"] = str(limits.memory_bytes)
        out["memory.swap.max"] = "0"
    if limits.cpus is not None:
        out["cpu.max"] = f"{cpu_quota_us(limits.cpus)} {CPU_PERIOD_US}"
    if limits.tasks is not None:
        out["pids.max"] = str(limits.tasks)
    return out


def check_name(name: str) -> str:
    """``name`` if it makes one cgroup folder (no ``/``, not ``.``/``..``, at most 255 bytes).

    Raises
    ------
    CgroupError
        It does not.
    """
    if not name or "/" in name or name in (".", "..") or len(name.encode()) > 255:
        raise CgroupError(f"{name!r} is not a cgroup name (one folder name, no '/')")
    return name


def hierarchy_folders(root: Path = CGROUP_ROOT) -> tuple[int, dict[str, Path]] | None:
    """Which cgroup hierarchy this host has: ``(2, {"": root})`` for cgroup v2 (unified),
    ``(1, {controller: folder})`` for v1 when each of :data:`V1_CONTROLLERS` is mounted, else
    None (no cgroups, or v1 without one of them)."""
    if (root / "cgroup.controllers").is_file():
        return 2, {"": root}
    folders = {c: root / c for c in V1_CONTROLLERS}
    if all((folder / "cgroup.procs").is_file() for folder in folders.values()):
        return 1, folders
    return None


def _write(path: Path, value: str) -> None:
    """Write ``value`` to a cgroup file.

    Raises
    ------
    CgroupError
        The kernel refused it; the message names the file and the value.
    """
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(
            f"cannot write {value!r} to {path}: {exc.strerror or exc} (the hub must run as root "
            "on a host whose cgroup file system is writable, or set c.ScaleLabSpawner.cgroups "
            "= 'off')"
        ) from None


class ServerCgroup:
    """One server's cgroup, ``<parent>/<name>`` in each hierarchy of ``root``.

    Parameters
    ----------
    parent
        Folder under each hierarchy's root that holds the servers' cgroups (``scalelab``),
        ``/``-separated.
    name
        This server's folder name (:func:`check_name`); unique per server start.
    root
        Where the cgroup file systems are mounted.

    Raises
    ------
    CgroupError
        The host has no usable cgroup hierarchy (:func:`hierarchy_folders`), or ``name`` is not
        a folder name.
    """

    def __init__(self, parent: str, name: str, root: Path = CGROUP_ROOT):
        found = hierarchy_folders(root)
        if found is None:
            raise CgroupError(
                f"no cgroup hierarchy under {root}: neither cgroup v2 nor v1's "
                f"{', '.join(V1_CONTROLLERS)} controllers are mounted"
            )
        self.version, bases = found
        self.name = check_name(name)
        self.root = root
        self.parent_parts = [check_name(p) for p in parent.strip("/").split("/") if p]
        self.parents = {c: base.joinpath(*self.parent_parts) for c, base in bases.items()}
        self.folders = {c: folder / self.name for c, folder in self.parents.items()}

    @property
    def memory_path(self) -> Path:
        """The folder of the cgroup's memory controller (v1 ``memory/...``, v2 the one)."""
        return self.folders.get("memory", self.folders.get(""))

    def create(self, limits: Limits) -> None:
        """Make the cgroup (and its parent) and write ``limits``.

        Raises
        ------
        CgroupError
            A folder cannot be made or the kernel refused a limit; the message names which.
        """
        if self.version == 2:
            self._enable_v2_controllers()
        for folder in (*self.parents.values(), *self.folders.values()):
            try:
                folder.mkdir(exist_ok=True)
            except OSError as exc:
                raise CgroupError(
                    f"cannot make the cgroup {folder}: {exc.strerror or exc} (the hub must run "
                    "as root with a writable cgroup file system, or set "
                    "c.ScaleLabSpawner.cgroups = 'off')"
                ) from None
        if self.version == 2:
            settings = v2_settings(limits)
            for file, value in settings.items():
                path = self.folders[""] / file
                if file != "memory.swap.max" or path.exists():  # no swap accounting: skip
                    _write(path, value)
            return
        for (controller, file), value in v1_settings(limits).items():
            _write(self.folders[controller] / file, value)
        memsw = self.folders["memory"] / "memory.memsw.limit_in_bytes"
        if limits.memory_bytes is not None and memsw.exists():
            _write(memsw, str(limits.memory_bytes))

    def _enable_v2_controllers(self) -> None:
        """Enable memory, cpu and pids for the children of each folder from the root down to
        the parent (cgroup v2 hands a controller down only where its parent enabled it).

        Raises
        ------
        CgroupError
            A folder cannot be made or the kernel refused to enable a controller.
        """
        folder = self.root
        for part in (*self.parent_parts, None):
            available = set((folder / "cgroup.controllers").read_text().split())
            wanted = sorted({"memory", "cpu", "pids"} & available)
            if wanted:
                _write(folder / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
            if part is None:
                return
            folder = folder / part
            try:
                folder.mkdir(exist_ok=True)
            except OSError as exc:
                why = exc.strerror or exc
                raise CgroupError(f"cannot make the cgroup {folder}: {why}") from None

    def join_paths(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes itself into to join (one per
        hierarchy)."""
        return [str(folder / "cgroup.procs") for folder in self.folders.values()]

    def processes(self) -> set[int]:
        """The pids in the cgroup now (empty when it is gone)."""
        pids: set[int] = set()
        for folder in self.folders.values():
            try:
                text = (folder / "cgroup.procs").read_text()
            except OSError:
                continue
            pids.update(int(line) for line in text.split())
        return pids

    def end(self, timeout_s: float = END_TIMEOUT_S) -> set[int]:
        """Kill every process still in the cgroup (SIGKILL, again until none is left: a
        process forking meanwhile is caught in the next round, and ``pids.max`` bounds how
        many it can make) and remove the cgroup's folders.

        Returns
        -------
        set of int
            The pids still there after ``timeout_s`` seconds (empty: all gone and the folders
            removed; else the folders are left for the next :meth:`end`).
        """
        deadline = time.monotonic() + timeout_s
        kill_file = self.folders[""] / "cgroup.kill" if self.version == 2 else None
        left = self.processes()
        while left and time.monotonic() < deadline:
            if kill_file is not None and kill_file.exists():  # v2: the kernel kills them all
                try:
                    kill_file.write_text("1")
                except OSError:
                    pass
            _kill_all(left)
            time.sleep(0.05)
            left = self.processes()
        if left:
            return left
        for folder in self.folders.values():
            _rmdir(folder, deadline)
        return set()


def join(paths: Iterable[str]) -> None:
    """Move the calling process into the cgroup whose ``cgroup.procs`` files are ``paths``
    (``"0"`` is "myself"). Made for a ``preexec_fn``: no allocation beyond the writes.

    Raises
    ------
    OSError
        The kernel refused (the spawner checked the cgroup before, so this is rare).
    """
    for path in paths:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def _kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _rmdir(folder: Path, deadline: float) -> None:
    """Remove an emptied cgroup folder; the kernel may call it busy a moment after its last
    process exited."""
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                return
            time.sleep(0.05)


def limits_of(memory_bytes: int | None, cpus: float | None, tasks: int | None) -> Limits:
    """:class:`Limits` from the spawner's values, 0 or None meaning "no limit" (pure)."""
    return Limits(
        memory_bytes=int(memory_bytes) if memory_bytes else None,
        cpus=float(cpus) if cpus else None,
        tasks=int(tasks) if tasks else None,
    )
