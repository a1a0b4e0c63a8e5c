"""``scalelab up``: a whole course hub on one machine, from embedded defaults.

It prepares and locks the state folder, starts JupyterHub in a child process with
:mod:`scalelab.commands.up_config`, waits until the hub answers and prints the URL and the
password; Ctrl-C, SIGTERM or SIGHUP stops the hub and everything it started.
Why: docs/design-notes.md, scalelab.commands.up.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import fsspec
import psutil

from scalelab import envvars
from scalelab.commands import up_hadoop
from scalelab.commands.errors import UpError
from scalelab.commands.identity import (
    Identity,
    blocked_for_others,
    choose_identity,
    install_paths,
)
from scalelab.commands.invocation import scalelab_command
from scalelab.commands.state_files import StateFolder, default_state_dir, default_store_url
from scalelab.commands.state_modes import HUB_UMASK, check_operator_config, protect_state
from scalelab.commands.up_config import (
    UpSettings,
    config_file_text,
    embedded_config,
)
from scalelab.commands.upstate import (
    SavedServer,
    clear_run_record,
    earlier_run,
    make_state_dir,
    new_paths,
    process_trees,
    read_run_record,
    recorded_alive,
    remove_new,
    saved_servers,
    stop_processes,
    write_run_record,
)
from scalelab.common.pdeathsig import become_subreaper, die_with_parent
from scalelab.common.ports import free_port, port_free
from scalelab.hub_ext.hub.config_check import ConfigProblem, check_hub_config
from scalelab.kernels.specs import install_kernelspecs
from scalelab.spawner.local import local_store_root
from scalelab.store import StoreError, missing_datasets, open_store
from scalelab.store.errors import store_failure

#: Seconds ``scalelab up`` waits for the hub to answer before it gives up.
READY_TIMEOUT_S = 180
#: Seconds the hub gets to stop its servers after SIGTERM before it is killed.
STOP_TIMEOUT_S = 120
#: Minimum password length (JupyterHub's SharedPasswordAuthenticator rule).
MIN_PASSWORD_LENGTH = 8
#: Signals that stop ``scalelab up`` cleanly: Ctrl-C, ``kill``, the terminal closed.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def absolute_store_url(store_url: str, cwd: Path | None = None) -> str:
    """``store_url`` with a relative local path made absolute against ``cwd`` (this folder).

    Each student server runs in its own home, so a relative path there would name another folder
    for each of them. URLs with a protocol (``file://``, ``s3://``, ``hdfs://`` ...) and absolute
    paths are returned as they are; ``~`` is expanded.
    """
    if fsspec.core.split_protocol(store_url)[0] is not None:
        return store_url
    path = Path(store_url).expanduser()
    if path.is_absolute():
        return str(path)
    return str(Path(os.path.abspath((cwd or Path.cwd()) / path)))


def up_settings(
    state_dir: Path,
    *,
    ip: str,
    port: int,
    store_url: str | None,
    cwd: Path | None = None,
    system_users: bool = False,
) -> UpSettings:
    """The settings ``scalelab up`` writes into its config (state folder already resolved).

    The hub's port and the proxy API's are the last run's (``<state>/hub-ports.json``) where
    those are free, so that servers left running across a restart still reach their hub; else
    free ports.

    Raises
    ------
    UpError
        configurable-http-proxy is not installed.
    """
    hub_port, proxy_api_port = saved_ports(StateFolder(state_dir))
    return UpSettings(
        state_dir=str(state_dir),
        store_url=absolute_store_url(store_url, cwd) if store_url else default_store_url(state_dir),
        proxy_command=find_proxy(),
        hub_port=hub_port or free_port(),
        proxy_api_port=proxy_api_port or free_port(),
        ip=ip,
        port=port,
        system_users=system_users,
    )


def find_proxy() -> list[str]:
    """argv of configurable-http-proxy: on PATH or beside this Python (``.venv/bin``).

    Raises
    ------
    UpError
        It is not installed.
    """
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which("configurable-http-proxy", path=search)
    if not found:
        raise UpError(
            "configurable-http-proxy was not found on PATH or beside this Python. Install it with "
            "./install.sh (it runs `npm ci`), or `npm install -g configurable-http-proxy`."
        )
    return [found]


def saved_ports(files: StateFolder) -> tuple[int | None, int | None]:
    """The last run's ``(hub_port, proxy_api_port)`` from ``<state>/hub-ports.json``, each None
    when not saved or not free on 127.0.0.1 now."""
    try:
        saved = json.loads(files.hub_ports.read_text())
        ports = (int(saved["hub_port"]), int(saved["proxy_api_port"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None, None
    if ports[0] == ports[1]:
        return None, None
    return tuple(p if port_free(p) else None for p in ports)  # type: ignore[return-value]


def save_ports(files: StateFolder, settings: UpSettings) -> None:
    """Write the run's hub and proxy API ports to ``<state>/hub-ports.json`` (mode 0600).

    Raises
    ------
    OSError
        The file cannot be written.
    """
    text = json.dumps({"hub_port": settings.hub_port, "proxy_api_port": settings.proxy_api_port})
    fd = os.open(files.hub_ports, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w") as out:
        out.write(text)


def prepare_state_dir(state_dir: Path, source: str = "--state-dir") -> None:
    """Create the state folder with ``homes/`` and ``logs/``, or refuse it in one line.

    Raises
    ------
    UpError
        It is a file, cannot be created, or is not writable; nothing was created.
        ``source`` names where the folder came from (``--state-dir``, ``$SCALELAB_STATE_DIR``).
    """
    reason = make_state_dir(state_dir, StateFolder.SUBFOLDERS)
    if reason is not None:
        raise UpError(f"cannot use {source} {state_dir}: {reason}; choose a folder you can write")


def check_no_earlier_run(state_dir: Path, leftovers: Iterable[int] = ()) -> None:
    """Raise :class:`UpError` if a hub (or a proxy) of an earlier ``scalelab up`` still runs
    for ``state_dir``, naming its pid and how to stop it.

    A proxy among ``leftovers`` (pids the earlier run recorded as its own, see
    :func:`stop_earlier_run`) is not refused: it is stopped instead.
    """
    found = earlier_run(state_dir)
    if found is None:
        return
    what, pid = found
    if what == "proxy" and pid in set(leftovers):
        return
    alone = " without its hub" if what == "proxy" else ""
    raise UpError(
        f"a {what} of an earlier `scalelab up` is still running for {state_dir} (pid {pid})"
        f"{alone}; stop it with `kill {pid}`"
    )


@dataclass(frozen=True)
class EarlierRun:
    """What ``scalelab up`` found of an earlier run that did not stop cleanly, and did.

    Attributes
    ----------
    pid
        The earlier ``scalelab up``'s pid.
    stopped
        ``(pid, command)`` of each leftover process it stopped.
    """

    pid: int
    stopped: tuple[tuple[int, str], ...]


def stop_earlier_run(record: dict | None, keep_servers: Iterable[SavedServer]) -> EarlierRun | None:
    """Stop what an earlier run that did not stop cleanly left running.

    Parameters
    ----------
    record
        That run's record (:func:`~scalelab.commands.upstate.read_run_record`), or None.
    keep_servers
        Servers to keep running, with their kernels: with ``c.JupyterHub.cleanup_servers =
        False``, those the hub's database lists as running (the hub finds them again).

    Returns
    -------
    EarlierRun or None
        None when there was no such run.
    """
    if record is None:
        return None
    keep = {os.getpid(), *process_trees(s.pid for s in keep_servers if s.alive() and s.pid)}
    leftovers = [p for p in recorded_alive(record) if p.pid not in keep]
    names = {int(e["pid"]): str(e.get("cmd", "?")) for e in record["processes"] if "pid" in e}
    stopped = stop_processes(leftovers)
    return EarlierRun(record["pid"], tuple((p.pid, names.get(p.pid, "?")) for p in stopped))


def state_folder_line(state_dir: Path, reused: bool) -> str:
    """The banner's line naming the state folder, and whether this start found an earlier
    run's hub database in it (pure)."""
    if not reused:
        return f"State folder: {state_dir} (new)"
    return (
        f"State folder: {state_dir} (an earlier run's users, homes and hub database, kept; "
        "--state-dir DIR for a fresh one)"
    )


def found_lines(
    earlier: EarlierRun | None,
    before: list[SavedServer],
    after: list[SavedServer],
) -> list[str]:
    """Banner lines on what this start found of the earlier run and did (empty: nothing).

    Parameters
    ----------
    earlier
        From :func:`stop_earlier_run`.
    before, after
        The servers the hub's database listed as running before the hub started, and once it
        answered (it has polled each by then: those found gone are cleared, their GPUs released).
    """
    lines = []
    now = {s.key: s for s in after}
    released = []
    for server in before:
        kept = now.get(server.key)
        gone = [g for g in server.gpus if kept is None or g not in kept.gpus]
        if gone:
            released.append(f"{', '.join(gone)} (held by {server.key}, no longer running)")
    found_running = [s for s in before if s.key in now]
    if earlier is not None:
        did = []
        if released:
            did.append(f"released GPU(s) {'; '.join(released)}")
        if earlier.stopped:
            names = ", ".join(f"{cmd} pid {pid}" for pid, cmd in earlier.stopped)
            did.append(f"stopped {len(earlier.stopped)} leftover process(es): {names}")
        lines.append(
            f"Found the state of an earlier run that did not stop cleanly (pid {earlier.pid}): "
            + ("; ".join(did) if did else "nothing of it was left running")
            + "."
        )
    elif released:
        lines.append(f"Released GPU(s) of servers that stopped meanwhile: {'; '.join(released)}.")
    if found_running:
        names = ", ".join(_server_words(now[s.key]) for s in found_running)
        lines.append(f"Found {len(found_running)} server(s) still running, kept: {names}.")
    return lines


def _server_words(server: SavedServer) -> str:
    gpus = f", GPU(s) {', '.join(server.gpus)}" if server.gpus else ""
    return f"{server.key} (pid {server.pid}{gpus})"


def check_port_free(ip: str, port: int) -> None:
    """Raise :class:`UpError` naming the port if something already listens on ``ip:port``."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise UpError(f"cannot listen on {ip}:{port}: {exc.strerror}") from None
            raise UpError(
                f"port {port} on {ip} is already in use by {describe_process(listener_pid(port))}. "
                "Stop it, or choose another port with --port."
            ) from None


def describe_process(pid: int | None) -> str:
    """``"pid 123 (scalelab up --port 8000)"``, or ``"another program"`` when it cannot be seen."""
    if pid is None:
        return "another program"
    try:
        command = " ".join(psutil.Process(pid).cmdline()[:6])
    except psutil.Error:
        return f"pid {pid}"
    return f"pid {pid} ({command})"


@dataclass
class StateLock:
    """An exclusive lock on a state folder (``flock`` on ``<state>/scalelab-up.lock``).

    The lock file holds the owner's pid and URL, so a second ``scalelab up`` can say who runs.
    The kernel releases the lock when the owner exits, however it exits.
    """

    path: Path
    _file: IO[str] | None = None

    def acquire(self, url: str) -> None:
        """Take the lock.

        Raises
        ------
        UpError
            Another process holds it; the message gives its pid and URL.
        """
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            try:
                owner = json.loads(handle.read() or "{}")
            except json.JSONDecodeError:
                owner = {}
            handle.close()
            raise UpError(
                f"ScaleLab is already running from {self.path.parent} "
                f"(pid {owner.get('pid', '?')}, {owner.get('url', 'URL unknown')}). "
                "Use that hub, or stop it with Ctrl-C in its terminal first."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "url": url}))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        """Release the lock (also released at exit)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def resolve_password(given: str | None) -> tuple[str, bool]:
    """The login password: ``given``, else ``$SCALELAB_PASSWORD``, else a generated one.

    Returns
    -------
    (password, generated)

    Raises
    ------
    UpError
        The password has fewer than 8 characters, is only whitespace, or ``--password`` was
        given empty (leave it out to get a generated one).
    """
    source = "--password" if given is not None else envvars.PASSWORD
    password = given if given is not None else os.environ.get(envvars.PASSWORD) or ""
    if given is None and not password:
        return secrets.token_urlsafe(12), True
    if not password.strip():
        what = "is empty" if not password else f"is only whitespace ({len(password)} characters)"
        instead = "leave --password out" if given is not None else f"unset {envvars.PASSWORD}"
        raise UpError(
            f"the password given by {source} {what}; it needs at least {MIN_PASSWORD_LENGTH} "
            f"characters besides spaces. Choose one, or {instead} to get a generated one."
        )
    if len(password) < MIN_PASSWORD_LENGTH:
        raise UpError(
            f"the password given by {source} has {len(password)} characters; it needs at least "
            f"{MIN_PASSWORD_LENGTH}. Choose a longer one, or unset it to get a generated one."
        )
    return password, False


#: Seconds a hub that ended is given for up's own stop signal to arrive before up calls the
#: end unexpected.
STOP_SIGNAL_GRACE_S = 1.0


def data_hint(store_url: str) -> str | None:
    """A line telling the operator which data sets are missing and how to fetch them, or None."""
    try:
        missing = missing_datasets(open_store(store_url))
    except Exception as exc:  # noqa: BLE001 -- each fsspec back end raises its own errors
        if isinstance(exc, StoreError):
            return f"The course store {store_url} cannot be read: {exc}"
        message = str(store_failure(store_url, exc))
        return message[0].upper() + message[1:]
    if not missing:
        return None
    # Name the store unless it is the one `scalelab data fetch` picks by itself.
    where = "" if store_url == default_store_url(default_state_dir()) else f" --store {store_url}"
    return (
        f"The course data sets are not in the store yet: {', '.join(missing)}. Fetch them with\n"
        f"  {scalelab_command()} data fetch {' '.join(missing)}{where}"
        "    (add --mirror DIR for a local copy)"
    )


def listener_pid(port: int) -> int | None:
    """Pid of the process listening on TCP ``port`` (any address).

    None when nothing listens, or when the listener is another user's process, which psutil
    cannot see.
    """
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


def wait_ready(url: str, port: int, proc: subprocess.Popen, stop: threading.Event) -> str:
    """Wait until our hub answers at ``url``.

    Returns ``"ready"``, ``"stopped"`` (Ctrl-C), ``"exited"`` (the hub died), ``"timeout"``, or
    ``"taken"`` when what answers is another program that took the port meanwhile.
    """
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if stop.is_set():
            return "stopped"
        if proc.poll() is not None:
            return "exited"
        try:
            with urllib.request.urlopen(f"{url}hub/api/", timeout=2) as response:
                if response.status == 200:
                    ours = {p.pid for p in _descendants(proc.pid)}
                    return "ready" if listener_pid(port) in ours else "taken"
        except (urllib.error.URLError, OSError):
            pass
        stop.wait(0.5)
    return "timeout"


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _stop_tree(
    proc: subprocess.Popen,
    stop: threading.Event,
    known: list[psutil.Process],
    spare: Callable[[], set[int]] = set,
) -> list[psutil.Process]:
    """SIGTERM the hub (which stops its servers and proxy), then end whatever survived.

    Parameters
    ----------
    proc
        The hub.
    stop
        Set by a second Ctrl-C while the hub stops: kill it now.
    known
        Descendants seen earlier, so that servers orphaned by a dead hub end too (with
        :func:`~scalelab.common.pdeathsig.become_subreaper` they are this process's
        descendants anyway).
    spare
        Called once the hub has exited: pids to leave running (the servers the hub leaves
        by design, with their kernels).

    Returns
    -------
    list of psutil.Process
        Those that were still running after the hub and were stopped.
    """
    tree = {p.pid: p for p in [*known, *_descendants(proc.pid)]}
    if proc.poll() is None:
        stop.clear()  # a second Ctrl-C while we wait means: stop now
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline and not stop.is_set():
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Orphans of the hub (a proxy it started again while stopping, or left after a failed
    # start) are ours now: this process is their subreaper.
    tree.update({p.pid: p for p in _descendants(os.getpid())})
    tree.pop(proc.pid, None)
    kept = spare()
    survivors = [p for pid, p in tree.items() if pid not in kept and _running(p)]
    stop_processes(survivors, timeout_s=5)
    return survivors


def _running(proc: psutil.Process) -> bool:
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            os.waitpid(proc.pid, os.WNOHANG)  # a child of ours (re-parented): reap it
            return False
        return True
    except (psutil.Error, ChildProcessError):
        return False


def _reap_orphans(hub_pid: int) -> None:
    """Reap the exited processes re-parented to this one (never the hub: Popen waits for it)."""
    for child in _descendants(os.getpid()):
        if child.pid != hub_pid:
            try:
                if child.ppid() == os.getpid() and child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)
            except (psutil.Error, ChildProcessError):
                continue


def _say(text: str, out: IO[str]) -> None:
    """Print lines once the hub runs (the banner, stopping); the terminal may be gone (EIO, a
    hang-up), which must not turn a clean run or stop into a traceback."""
    try:
        print(text, file=out, flush=True)
    except OSError:
        pass


def _log_tail(path: Path, offset: int, lines: int = 30) -> str:
    """The last ``lines`` lines written to ``path`` after byte ``offset`` (this run's), with the
    error that stopped the hub, if one was logged, repeated first."""
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
    except OSError:
        return ""
    tail = text.splitlines()[-lines:]
    errors = [ln for ln in text.splitlines() if _ERROR_LINE.match(ln)]
    reason = f"Reason: {_LOG_PREFIX.sub('', errors[-1]).strip()}\n" if errors else ""
    return reason + "\n".join(tail)


#: A raised exception's last line, or a critical/error line of JupyterHub's log.
_ERROR_LINE = re.compile(r"^(\s*[\w.]*(Error|Exception)(:|$)|\[[CE] )")
_LOG_PREFIX = re.compile(r"^\[[CE] [^\]]*\]\s*")


def run_up(
    state_dir: Path,
    *,
    ip: str = "127.0.0.1",
    port: int = 8000,
    password: str | None = None,
    store_url: str | None = None,
    operator_config: str | None = None,
    out: IO[str] = sys.stdout,
    state_source: str = "--state-dir",
    shared_identity: bool = False,
    hadoop: bool = False,
) -> int:
    """Run the course hub until Ctrl-C, SIGTERM or SIGHUP.

    With ``hadoop``, the hub also runs the Hadoop test cluster as a service, the course store on
    its HDFS and Spark on its YARN (:mod:`scalelab.commands.up_hadoop`); the URL is printed once
    the cluster is up too.

    Call it from the main thread: the hub is tied to the thread that starts it
    (:func:`~scalelab.common.pdeathsig.die_with_parent`).

    Returns
    -------
    int
        Exit status: 0 after a clean stop, 1 when the hub failed to start or died.

    Raises
    ------
    UpError
        Before anything started: the state folder cannot be used (``state_source`` names where
        it came from) or is in use, a hub of an earlier run still runs there, the port is taken,
        the proxy is missing, the password is too short, or the operator's config file does not
        exist, does not compile, fails to run, has a misspelt or bad ScaleLab setting, or is
        readable by other users while students get system users; or every login would share
        one identity on an address beyond loopback without ``shared_identity``
        (:func:`~scalelab.commands.identity.choose_identity`); with ``hadoop``, also a
        ``store_url`` given, or the cluster cannot be run (not built, a fixed port taken, its
        user cannot be made or cannot reach the state folder).
    """
    state_dir = state_dir.expanduser().resolve()
    url = f"http://{ip}:{port}/"
    if operator_config and not Path(operator_config).is_file():
        raise UpError(f"the config file {operator_config} does not exist.")
    made = new_paths(state_dir)  # what a refused start removes again
    files = StateFolder(state_dir)
    lock = StateLock(files.lock)
    try:
        prepare_state_dir(state_dir, state_source)
        lock.acquire(url)
    except UpError:
        remove_new(made)
        raise
    try:
        try:
            record = read_run_record(files)
            check_no_earlier_run(state_dir, [p.pid for p in recorded_alive(record or {})])
            password, generated = resolve_password(password)
            settings = up_settings(state_dir, ip=ip, port=port, store_url=store_url)
            if hadoop:
                settings = with_hadoop(files, settings, store_url)
            identity = decide_identity(files, settings, shared_identity)
            if identity.system_users and operator_config:
                problem = check_operator_config(operator_config)
                if problem:
                    raise UpError(problem)
            settings = up_settings_with(settings, system_users=identity.system_users)
            try:  # the hub's own start-up validation, run here: one line instead of a traceback
                merged = check_hub_config(embedded_config(settings, password), operator_config)
            except ConfigProblem as exc:
                raise UpError(f"{exc}. {exc.fix}") from None
            hub = HubFacts.of(merged, files)
            # A proxy the earlier run left holds the port: stop the leftovers before checking.
            earlier = stop_earlier_run(record, [] if hub.cleanup_servers else hub.servers())
            check_port_free(ip, port)
            if settings.hadoop:
                up_hadoop.check_ports(up_hadoop.HadoopService.from_dict(settings.hadoop))
        except UpError:
            remove_new(made)
            raise
        install_kernelspecs(files.kernelspecs)
        config_path = files.config_file
        config_path.write_text(config_file_text(settings, operator_config))
        save_ports(files, settings)
        protect(files, settings)
        hint = None if settings.hadoop else data_hint(settings.store_url)  # HDFS: once it is up
        return _serve(settings, config_path, password, generated, hint, identity, out, hub, earlier)
    finally:
        lock.release()


@dataclass(frozen=True)
class HubFacts:
    """What ``scalelab up`` needs to know of the hub's merged configuration.

    Attributes
    ----------
    cleanup_servers
        ``c.JupyterHub.cleanup_servers`` (True unless the operator's config says False).
    database
        The hub's SQLite file when it is the state folder's (the embedded ``db_url``), else None
        (another database: its servers are not looked at).
    """

    cleanup_servers: bool
    database: Path | None

    @classmethod
    def of(cls, merged, files: StateFolder) -> HubFacts:
        """From the merged ``traitlets`` config of the hub (:func:`check_hub_config`)."""
        section = merged.JupyterHub
        cleanup = section.get("cleanup_servers", True)
        db_url = section.get("db_url", "")
        ours = db_url == f"sqlite:///{files.database}"
        return cls(cleanup_servers=cleanup is not False, database=files.database if ours else None)

    def servers(self) -> list[SavedServer]:
        """The servers the hub's database lists as running (empty without our database)."""
        return saved_servers(self.database) if self.database is not None else []


def decide_identity(files: StateFolder, settings: UpSettings, shared_identity: bool) -> Identity:
    """Who the servers will run as (:func:`~scalelab.commands.identity.choose_identity`), with
    the state folder's modes set for it.

    Run by root, the folders students' users must reach -- ScaleLab's Python and package, the
    homes, the kernelspecs, a local store -- are checked with the state folder already opened
    for them; if one is closed, the servers share one identity, on loopback only.

    Raises
    ------
    UpError
        From ``choose_identity``, or a mode cannot be set.
    """
    euid = os.geteuid()
    blocked = None
    opened = euid == 0 and not shared_identity
    if opened:
        protect(files, settings, system_users=True)
        store = local_store_root(settings.store_url)
        blocked = blocked_for_others(
            [
                *install_paths(),
                files.homes,
                files.kernelspecs,
                *([store] if store is not None else []),
            ]
        )
    try:
        identity = choose_identity(
            euid=euid,
            user=_user_name(),
            ip=settings.ip,
            shared_identity=shared_identity,
            blocked=blocked,
        )
    finally:  # refused or not: the state folder is closed again unless students need it open
        if not (opened and blocked is None):
            protect(files, settings, system_users=False)
    return identity


def up_settings_with(settings: UpSettings, *, system_users: bool) -> UpSettings:
    """``settings`` with ``system_users`` set."""
    return UpSettings(**{**asdict(settings), "system_users": system_users})


def with_hadoop(files: StateFolder, settings: UpSettings, store_url: str | None) -> UpSettings:
    """``settings`` for ``--hadoop``: the cluster prepared
    (:func:`~scalelab.commands.up_hadoop.prepare`), the store on its HDFS.

    Raises
    ------
    UpError
        ``--store`` was given too, or from ``prepare``.
    """
    if store_url:
        raise UpError(
            "--hadoop puts the course store on the test cluster's HDFS: drop --store (or drop "
            "--hadoop and set --store to your own cluster's hdfs:// URL)"
        )
    service = up_hadoop.prepare(files)
    changed = {"store_url": service.store_url, "hadoop": service.to_dict()}
    return UpSettings(**{**asdict(settings), **changed})


def protect(files: StateFolder, settings: UpSettings, system_users: bool | None = None) -> None:
    """:func:`~scalelab.commands.state_modes.protect_state`, an ``OSError`` as one line."""
    chosen = settings.system_users if system_users is None else system_users
    cluster_user = bool(settings.hadoop and settings.hadoop.get("user"))
    try:
        protect_state(
            files,
            system_users=chosen,
            store=local_store_root(settings.store_url),
            traversable=cluster_user,
        )
    except OSError as exc:
        raise UpError(
            f"cannot set the modes of {exc.filename or files.root}: {exc.strerror or exc}"
        ) from None


def _user_name() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (KeyError, ImportError):
        return f"uid {os.geteuid()}"


def _hub_preexec() -> Callable[[], None]:
    """The hub's ``preexec_fn``: umask 077 (what it writes is the hub's alone), and SIGTERM when
    ``scalelab up`` dies (:func:`~scalelab.common.pdeathsig.die_with_parent`)."""
    with_parent = die_with_parent(signal.SIGTERM)

    def preexec() -> None:
        os.umask(HUB_UMASK)
        with_parent()

    return preexec


def _serve(
    settings: UpSettings,
    config_path: Path,
    password: str,
    generated: bool,
    hint: str | None,
    identity: Identity,
    out: IO[str],
    hub: HubFacts,
    earlier: EarlierRun | None,
) -> int:
    state_dir = Path(settings.state_dir)
    files = StateFolder(state_dir)
    url = f"http://{settings.ip}:{settings.port}/"
    log_path = files.hub_log
    log_offset = log_path.stat().st_size if log_path.exists() else 0
    env = {**os.environ, envvars.PASSWORD: password}
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in STOP_SIGNALS}
    known: list[psutil.Process] = []
    servers_before = hub.servers()
    reused = files.database.exists()  # before the hub makes one
    become_subreaper()  # what the hub leaves when it exits stays ours to stop
    print(f"Starting ScaleLab's hub (log: {log_path}) ...", file=out, flush=True)
    try:
        with open(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
            os.chmod(log_path, 0o600)  # the hub's log is its own, like its other files
            proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(config_path)],
                cwd=state_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us; we stop the hub in order
                preexec_fn=_hub_preexec(),  # private files; and if we are killed, it stops
            )
        _record(files, [psutil.Process(proc.pid)])
        try:
            state = wait_ready(url, settings.port, proc, stop)
            if state == "stopped":
                _say("Stopping ScaleLab before it was ready ...", out)
                return 0
            if state == "taken":
                print(
                    f"Port {settings.port} was taken by another program while ScaleLab started "
                    f"({describe_process(listener_pid(settings.port))}). Stop it, or choose a port "
                    "with --port.",
                    file=out,
                )
                return 1
            if state != "ready":
                print(
                    f"The hub did not start. Last lines of {log_path}:\n"
                    + _log_tail(log_path, log_offset),
                    file=out,
                )
                return 1
            cluster_lines: list[str] = []
            if settings.hadoop:
                service = up_hadoop.HadoopService.from_dict(settings.hadoop)
                state = _wait_cluster(service, proc, stop, out)
                if state == "stopped":
                    _say("Stopping ScaleLab before it was ready ...", out)
                    return 0
                if state != "ready":
                    print(state + _log_tail(log_path, log_offset), file=out)
                    return 1
                hint = data_hint(settings.store_url)
                cluster_lines = up_hadoop.banner_lines(service)
            banner = [hint] if hint else []
            banner += [
                f"\nScaleLab is running at {url}",
                f"  Log in with any user name and the password: {password}",
            ]
            if generated:
                banner.append(
                    "  (generated for this run; set SCALELAB_PASSWORD or --password to choose it)"
                )
            banner += [f"  Course store: {settings.store_url}", *cluster_lines]
            banner.append(f"  {state_folder_line(state_dir, reused)}")
            banner.append(f"  {identity.banner}")
            banner += [f"  {line}" for line in found_lines(earlier, servers_before, hub.servers())]
            banner.append("  Press Ctrl-C to stop the hub and every server it started.")
            # The hub runs from here on: a terminal closed while this is written (EIO) must
            # stop it as a hang-up does, not end up with an exception (status 1).
            _say("\n".join(banner), out)
            recorded: set[int] = set()
            while not stop.is_set() and proc.poll() is None:
                known = _descendants(proc.pid) or known
                _reap_orphans(proc.pid)
                try:
                    everything = [psutil.Process(proc.pid), *_descendants(os.getpid())]
                except psutil.NoSuchProcess:  # the hub ended just now: the loop's test says so
                    continue
                if {p.pid for p in everything} != recorded:
                    _record(files, everything)
                    recorded = {p.pid for p in everything}
                stop.wait(2)
            # A hub that ended together with a stop signal to up (a closed terminal sends SIGHUP
            # to both at once) was stopped, not crashed: the signal's handler gets a second.
            if proc.poll() is not None and not stop.wait(STOP_SIGNAL_GRACE_S):
                _say(  # the terminal may be gone too (EIO)
                    f"The hub exited unexpectedly. Last lines of {log_path}:\n"
                    + _log_tail(log_path, log_offset),
                    out,
                )
                return 1
            _say("Stopping ScaleLab: servers, proxy, hub ...", out)
            return 0
        finally:
            _stop_tree(proc, stop, known, spare=lambda: _kept_servers(hub, out))
            clear_run_record(files)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_cluster(
    service: up_hadoop.HadoopService, proc: subprocess.Popen, stop: threading.Event, out: IO[str]
) -> str:
    """Wait for the Hadoop test cluster (:func:`~scalelab.commands.up_hadoop.wait_ready`), then
    make the course folders. Returns ``"ready"``, ``"stopped"``, or what went wrong (the hub's
    log tail follows it)."""
    log = service.data_dir / "cluster.log"
    _say(f"Starting the Hadoop test cluster (HDFS and YARN; log: {log}) ...", out)
    state = up_hadoop.wait_ready(service, stop, lambda: proc.poll() is None)
    if state == "ready":
        try:
            up_hadoop.prepare_course_store(service)
        except UpError as exc:
            return f"{exc}\nLast lines of the hub's log:\n"
        return state
    if state == "timeout":
        return (
            f"The Hadoop test cluster did not start within {up_hadoop.READY_TIMEOUT_S:.0f} s. "
            f"Last lines of {log}:\n{up_hadoop.log_tail(service)}\nLast lines of the hub's log:\n"
        )
    return state if state == "stopped" else "The hub did not start. Last lines of its log:\n"


def _record(files: StateFolder, processes: list[psutil.Process]) -> None:
    """Write the run record; a failure to write it must not stop the hub."""
    try:
        write_run_record(files, processes)
    except OSError:
        pass


def _kept_servers(hub: HubFacts, out: IO[str]) -> set[int]:
    """With ``cleanup_servers = False``: the pids of the servers the stopped hub left running
    (and their kernels), named in one line; else none."""
    if hub.cleanup_servers:
        return set()
    kept = [s for s in hub.servers() if s.alive() and s.pid]
    if kept:
        names = ", ".join(f"{s.key} (pid {s.pid})" for s in kept)
        _say(
            f"Left {len(kept)} server(s) running (c.JupyterHub.cleanup_servers = False): {names}; "
            "the next `scalelab up` on this state folder finds them again.",
            out,
        )
    return process_trees(s.pid for s in kept if s.pid)
