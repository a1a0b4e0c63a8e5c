"""The state folder of ``scalelab up``: made usable before anything starts, and checked for a
hub or proxy that an earlier ``scalelab up`` left running in it.

Both functions do I/O (the file system, ``/proc`` through psutil) and return a plain answer for
:mod:`scalelab.commands.up` to word as an error: a reason string, or ``(what, pid)``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import psutil

from scalelab.commands.state_files import StateFolder


def make_state_dir(path: Path, subfolders: Iterable[str] = ()) -> str | None:
    """Create the state folder ``path`` (and missing parents) and its ``subfolders``.

    The folder must be a folder and writable: that is tried for real (a temporary file is made
    and removed), since permission bits do not tell (root, read-only mounts, ``/proc``).

    Parameters
    ----------
    path
        The state folder, absolute.
    subfolders
        Names of folders to create inside it (e.g. ``homes``, ``logs``).

    Returns
    -------
    str or None
        None when the folder is ready; else why it cannot be used, e.g. ``"it is a file, not a
        folder"``. On failure every folder this call created is removed again: nothing is left.
    """
    created: list[Path] = []
    try:
        reason = _make(path, subfolders, created)
    except OSError as exc:
        reason = f"{exc.filename or path} cannot be read ({exc.strerror or exc})"
    if reason is not None:
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                pass
    return reason


def _make(path: Path, subfolders: Iterable[str], created: list[Path]) -> str | None:
    missing: list[Path] = []
    existing = path
    while not existing.exists() and existing != existing.parent:
        missing.append(existing)
        existing = existing.parent
    if not existing.is_dir():
        what = "it" if existing == path else str(existing)
        kind = "a file" if existing.is_file() else "something else"
        return f"{what} is {kind}, not a folder"
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except OSError as exc:
            return f"it cannot be created in {folder.parent} ({exc.strerror})"
        created.append(folder)
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".scalelab-write-test-")
    except OSError as exc:
        return f"it is not writable ({exc.strerror})"
    os.close(fd)
    os.unlink(probe)
    for name in subfolders:
        folder = path / name
        if folder.is_dir():
            continue
        try:
            folder.mkdir()
        except OSError as exc:
            return f"{folder} cannot be created ({exc.strerror})"
        created.append(folder)
    return None


def earlier_run(state_dir: Path) -> tuple[str, int] | None:
    """A hub or proxy of an earlier ``scalelab up`` on ``state_dir`` that is still running.

    The hub is the process named in ``<state>/jupyterhub.pid`` whose command line is
    ``jupyterhub -f <state>/jupyterhub_config.py``; the proxy, the configurable-http-proxy named
    in ``<state>/jupyterhub-proxy.pid``. A stale pid file (the process gone, a zombie, or the pid
    reused by another program) does not count.

    Returns
    -------
    ("hub", pid), ("proxy", pid) or None
    """
    files = StateFolder(state_dir)
    config = str(files.config_file)
    hub = _live_pid(files.hub_pid, lambda argv: config in argv and "jupyterhub" in argv)
    if hub is not None:
        return "hub", hub
    proxy = _live_pid(
        files.proxy_pid,
        lambda argv: any("configurable-http-proxy" in arg for arg in argv),
    )
    if proxy is not None:
        return "proxy", proxy
    return None


def _live_pid(pid_file: Path, matches) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if pid == os.getpid():
        return None
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        argv = process.cmdline()
    except psutil.Error:
        return None
    return pid if matches(argv) else None
