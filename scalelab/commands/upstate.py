"""The state folder of ``scalelab up``: made usable before anything starts, checked for a
hub or proxy that an earlier ``scalelab up`` left running in it, cleaned of what a refused start
made (:func:`new_paths`, :func:`remove_new`), the record of a run that tells the next one what
it left if it did not stop cleanly (:func:`write_run_record`, :func:`read_run_record`), and the
servers the hub's database keeps (:func:`saved_servers`).

These functions do I/O (the file system, ``/proc`` through psutil, SQLite) and return plain
answers for :mod:`scalelab.commands.up` to word: a reason string, ``(what, pid)``, lists.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from scalelab.commands.state_files import StateFolder
from scalelab.common.processes import pid_runs


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


# -- what a refused start must not leave ---------------------------------------------------------


def new_paths(state_dir: Path) -> list[Path]:
    """The paths ``scalelab up`` may create in ``state_dir`` that do not exist yet, outermost
    first, to be removed with :func:`remove_new` if the start is refused.

    When ``state_dir`` does not exist, that is its outermost missing ancestor alone (all of it
    is this run's); else the state folder's own entries (:class:`StateFolder`) that are missing.
    """
    files = StateFolder(state_dir)
    if not state_dir.exists():
        top = state_dir
        while not top.parent.exists() and top.parent != top:
            top = top.parent
        return [top]
    entries = (
        files.lock, files.homes, files.logs, files.store, files.store / "home",
        files.store / "datasets", files.root / "share", files.config_file, files.hub_ports,
    )  # fmt: skip
    return [p for p in entries if not p.exists() and not p.is_symlink()]


def remove_new(paths: Iterable[Path]) -> None:
    """Remove each of ``paths`` that exists now (a folder with all it holds), deepest first.

    ``paths`` come from :func:`new_paths`: they did not exist before this run, so nothing of
    anyone else's is in them. What cannot be removed is left (no error).
    """
    for path in sorted(paths, key=lambda p: len(p.parts), reverse=True):
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        except OSError:
            pass


# -- the record of a run, and what an earlier run left ----------------------------------------


def write_run_record(files: StateFolder, processes: Iterable[psutil.Process]) -> None:
    """Write ``<state>/scalelab-up.run.json``: this process's pid and ``processes`` (pid,
    start time, command), replacing the file atomically (mode 0600).

    Raises
    ------
    OSError
        The file cannot be written.
    """
    procs = []
    for proc in processes:
        try:
            procs.append({"pid": proc.pid, "started": proc.create_time(), "cmd": _short_cmd(proc)})
        except psutil.Error:
            continue
    text = json.dumps({"pid": os.getpid(), "processes": procs})
    fd, tmp = tempfile.mkstemp(dir=files.root, prefix=".scalelab-run-")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, files.run_record)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_run_record(files: StateFolder) -> dict | None:
    """The record an earlier ``scalelab up`` left (it did not stop cleanly), or None.

    Returns
    -------
    dict or None
        ``{"pid": int, "processes": [{"pid", "started", "cmd"}, ...]}``; None when there is no
        record, it is unreadable, or it is this process's own.
    """
    try:
        record = json.loads(files.run_record.read_text())
        pid = int(record["pid"])
        processes = [p for p in record.get("processes", []) if isinstance(p, dict)]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid == os.getpid():
        return None
    return {"pid": pid, "processes": processes}


def clear_run_record(files: StateFolder) -> None:
    """Remove the run record (a clean stop); no error if it is gone."""
    try:
        files.run_record.unlink()
    except FileNotFoundError:
        pass


def recorded_alive(record: dict) -> list[psutil.Process]:
    """The processes of ``record`` (:func:`read_run_record`) that still run: same pid and same
    start time (a reused pid is another program's), zombies left out."""
    alive = []
    for entry in record.get("processes", []):
        try:
            proc = psutil.Process(int(entry["pid"]))
            if abs(proc.create_time() - float(entry["started"])) > 0.01:
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, KeyError, TypeError, ValueError):
            continue
        alive.append(proc)
    return alive


def stop_processes(procs: Iterable[psutil.Process], timeout_s: float = 10) -> list[psutil.Process]:
    """SIGTERM each of ``procs``, wait up to ``timeout_s`` seconds, SIGKILL what is left.

    Returns
    -------
    list of psutil.Process
        Those that were running when asked to stop (and are gone now, unless unkillable).
    """
    running = []
    for proc in procs:
        try:
            proc.terminate()
            running.append(proc)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(running, timeout=timeout_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
    return running


def _short_cmd(proc: psutil.Process) -> str:
    argv = proc.cmdline()
    words = [Path(argv[0]).name] if argv else [proc.name()]
    if len(argv) > 2 and argv[1] == "-m":
        words = [argv[2]]
    elif len(argv) > 1 and argv[0].endswith("node"):
        words = [Path(argv[1]).name]
    return words[0]


# -- the hub's database: the servers it keeps --------------------------------------------------


@dataclass(frozen=True)
class SavedServer:
    """A server JupyterHub's database lists as running.

    Attributes
    ----------
    key
        ``"<user>/<server name>"`` (``alice/`` for the default server).
    pid
        Its process id in the spawner state (LocalProcessSpawner's), or None.
    gpus
        UUIDs of the GPUs its ScaleLab spawner state holds (empty: none).
    """

    key: str
    pid: int | None
    gpus: tuple[str, ...]

    def alive(self) -> bool:
        """Whether its pid runs (and is no zombie)."""
        return self.pid is not None and pid_runs(self.pid)


def saved_servers(database: Path) -> list[SavedServer]:
    """The servers JupyterHub's SQLite ``database`` lists as running (read-only).

    Returns
    -------
    list of SavedServer
        Empty when the file does not exist or cannot be read as JupyterHub's database.
    """
    if not database.is_file():
        return []
    try:
        con = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute(
                "SELECT users.name, spawners.name, spawners.state FROM spawners "
                "JOIN users ON users.id = spawners.user_id WHERE spawners.server_id IS NOT NULL"
            ).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []
    servers = []
    for user, name, state_text in rows:
        try:
            state = json.loads(state_text or "{}")
        except (TypeError, ValueError):
            state = {}
        pid = state.get("pid") if isinstance(state, dict) else None
        scalelab = state.get("scalelab") if isinstance(state, dict) else None
        gpus = scalelab.get("gpus", []) if isinstance(scalelab, dict) else []
        servers.append(
            SavedServer(
                f"{user}/{name or ''}",
                pid if isinstance(pid, int) and pid > 0 else None,
                tuple(str(g) for g in gpus),
            )
        )
    return servers


def process_trees(pids: Iterable[int]) -> set[int]:
    """``pids`` with every descendant of each (a server and its kernels)."""
    found: set[int] = set()
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            found.add(pid)
            found.update(p.pid for p in proc.children(recursive=True))
        except psutil.Error:
            continue
    return found
