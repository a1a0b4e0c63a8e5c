"""``scalelab doctor``: check what a course hub needs before students arrive.

Each check is a function that returns a :class:`Check` (name, status ``ok``/``warn``/``fail``,
detail, fix), never raises for a broken host and never creates or changes anything; the checks
read the hub's configuration as the hub will. :func:`exit_status` is 1 when any check failed.
Why: docs/design-notes.md, scalelab.commands.doctor.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scalelab.commands.doctor_report import FAIL, OK, WARN, Check
from scalelab.commands.invocation import scalelab_command
from scalelab.commands.state_files import StateFolder
from scalelab.kernels.spark_defaults import DEFAULT_SPARK_MASTER

#: Oldest Java that Spark 4 runs on.
MIN_JAVA = 17
#: Seconds a check may wait on an external program or a remote store.
CHECK_TIMEOUT_S = 60.0


def _run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Run ``argv``; (exit status, stdout+stderr). Raises OSError / TimeoutExpired."""
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
        env=dict(env) if env is not None else None,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def find_java(env: Mapping[str, str]) -> tuple[str | None, str]:
    """The ``java`` a Spark driver started with ``env`` would run, and where it came from.

    ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set (Spark's own rule), else ``java`` on
    ``PATH``. Returns ``(None, reason)`` when there is none.
    """
    java_home = env.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if os.access(java, os.X_OK):
            return str(java), f"JAVA_HOME={java_home}"
        return None, f"JAVA_HOME={java_home} has no bin/java"
    found = shutil.which("java", path=env.get("PATH", ""))
    if found:
        return found, "PATH"
    return None, "no java on PATH and JAVA_HOME is unset"


def check_java(env: Mapping[str, str]) -> Check:
    """Java for Spark: present, runs, version >= 17."""
    fix = (
        f"Install Java {MIN_JAVA} or newer (Debian: apt-get install openjdk-17-jre-headless, "
        "which ./install.sh does) and set JAVA_HOME to its folder, or unset a wrong JAVA_HOME."
    )
    java, source = find_java(env)
    if java is None:
        return Check("Java", FAIL, source, fix)
    try:
        status, out = _run([java, "-version"], env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("Java", FAIL, f"{java} ({source}) does not run: {exc}", fix)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if status != 0 or not match:
        return Check("Java", FAIL, f"{java} -version failed: {out.strip()[:200]}", fix)
    major = int(match.group(1))
    if major == 1:  # "1.8.0" style
        major = int(match.group(2) or 0)
    if major < MIN_JAVA:
        return Check("Java", FAIL, f"Java {major} at {java}; Spark 4 needs {MIN_JAVA}+", fix)
    return Check("Java", OK, f"Java {major} at {java} (from {source})")


def spark_home() -> Path | None:
    """The Spark distribution inside the installed ``pyspark`` package, or None."""
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).parent


def check_spark(env: Mapping[str, str], spark_master: str) -> Check:
    """Spark: ``spark-submit --version`` of the kernels' pyspark runs under ``env``."""
    home = spark_home()
    if home is None:
        return Check(
            "Spark",
            FAIL,
            "pyspark is not installed in this Python",
            "Install the kernels: pip install 'scalelab[kernels]' (./install.sh does).",
        )
    submit = home / "bin" / "spark-submit"
    fix = "Fix Java first (see the Java check); Spark needs it to start its driver."
    try:
        status, out = _run([str(submit), "--version"], {**env, "SPARK_HOME": str(home)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("Spark", FAIL, f"{submit} --version did not run: {exc}", fix)
    match = re.search(r"version (\d+\.\d+\.\d+)", out)
    if status != 0 or not match:
        first = out.strip().splitlines()[:1] or ["no output"]
        return Check("Spark", FAIL, f"spark-submit --version failed: {first[0][:200]}", fix)
    return Check("Spark", OK, f"Spark {match.group(1)} at {home}, master {spark_master}")


def _with_timeout(fn: Callable[[], Any], timeout_s: float) -> Any:
    """``fn()`` in a worker thread; TimeoutError after ``timeout_s`` (the thread is abandoned)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn).result(timeout=timeout_s)
    finally:
        pool.shutdown(wait=False)


def check_store(
    store_url: str,
    store_options: Mapping[str, Any],
    timeout_s: float = CHECK_TIMEOUT_S,
    spawner: str = "ScaleLabSpawner",
) -> Check:
    """The course store: it exists, its root can be listed within ``timeout_s``, and it holds
    the course's data sets.

    A local store (``file://`` URL or plain path, relative ones against this folder) is looked
    at on disk and never created: a missing one fails, and its fix is the
    ``scalelab data fetch`` that makes it and fills it. Any other store is opened through
    fsspec (:func:`scalelab.store.open_store`) and its root listed. A reachable store without
    every data set (:func:`scalelab.store.missing_datasets`) is a warning naming them, with the
    fetch command as its fix. ``spawner`` names the section of the settings. Never raises.
    """
    from scalelab.spawner.local import local_store_root

    fix = (
        f"Check c.{spawner}.store_url and store_options (or --store): the server must be "
        "up and reachable from the hub's machine, and the credentials valid."
    )
    if not store_url:
        return Check("Course store", FAIL, "no store URL is configured", fix)
    local = local_store_root(store_url)
    if local is not None:
        reached = _check_local_store(store_url, local, timeout_s)
        return _with_datasets(reached, store_url, store_options)

    def probe() -> int:
        from scalelab.store import open_store

        fs = open_store(store_url, store_options)
        return len(fs.ls("", detail=False))

    try:
        entries = _with_timeout(probe, timeout_s)
    except concurrent.futures.TimeoutError:
        return Check("Course store", FAIL, f"{store_url}: no answer in {timeout_s:.0f} s", fix)
    except Exception as exc:  # noqa: BLE001 -- each fsspec back end raises its own errors
        detail = f"{store_url} cannot be read: {type(exc).__name__}: {str(exc)[:200]}"
        return Check("Course store", FAIL, detail, fix)
    reached = Check("Course store", OK, f"{store_url} is reachable ({entries} entries at its root)")
    return _with_datasets(reached, store_url, store_options)


def _with_datasets(check: Check, store_url: str, store_options: Mapping[str, Any]) -> Check:
    """``check`` (a reachable store's), or a warning when the store lacks course data sets.

    Reads only (the data sets' manifests); a store that cannot be read for this keeps
    ``check`` as it was, since reaching it was checked already.
    """
    if check.status != OK:
        return check
    try:
        from scalelab.store import missing_datasets, open_store

        missing = _with_timeout(
            lambda: missing_datasets(open_store(store_url, store_options)), CHECK_TIMEOUT_S
        )
    except Exception:  # noqa: BLE001 -- reaching it was the check; this is advice on top
        return check
    if not missing:
        return Check(check.name, OK, f"{check.detail}; it holds the course data sets")
    fix = f"{scalelab_command()} data fetch {' '.join(missing)} --store {shlex.quote(store_url)}"
    return Check(
        check.name, WARN, f"{check.detail}, but lacks data sets: {', '.join(missing)}", fix
    )


def fetch_command(store_url: str) -> str:
    """The ``scalelab data fetch`` that creates the store ``store_url`` with the course's data
    sets (:data:`scalelab.store.DATASETS`), as one shell line."""
    from scalelab.store import DATASETS

    return f"{scalelab_command()} data fetch {' '.join(DATASETS)} --store {shlex.quote(store_url)}"


def _check_local_store(store_url: str, folder: Path, timeout_s: float) -> Check:
    """The local store ``folder`` (of ``store_url``): a folder that can be listed; read only."""
    if not os.path.lexists(folder):
        return Check("Course store", FAIL, f"{store_url} does not exist", fetch_command(store_url))
    if not folder.is_dir():
        return Check(
            "Course store",
            FAIL,
            f"{store_url} is not a folder ({folder})",
            f"Move {folder} away, or choose another store (c.ScaleLabSpawner.store_url or "
            "--store).",
        )
    try:
        entries = _with_timeout(lambda: len(os.listdir(folder)), timeout_s)
    except concurrent.futures.TimeoutError:
        return Check(
            "Course store",
            FAIL,
            f"{store_url}: no answer in {timeout_s:.0f} s",
            f"Check the file system that holds {folder} (a hung network mount?).",
        )
    except OSError as exc:
        return Check(
            "Course store",
            FAIL,
            f"{store_url} cannot be read: {exc.strerror or exc}",
            f"Make {folder} readable by the hub's user.",
        )
    return Check("Course store", OK, f"{store_url} is reachable ({entries} entries at its root)")


def _nearest_existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _folder_problem(folder: Path) -> str | None:
    """Why files cannot be made in the existing ``folder``, or None when they can.

    Asked of the kernel (``os.access``), never tried: doctor writes nothing. So root passes
    anywhere but on a read-only mount, as root's hub would.
    """
    if not folder.is_dir():
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable by this user"
    return None


def check_homes(home_root: str, spawner: str = "ScaleLabSpawner") -> Check:
    """The folder of users' homes is writable, or can be created (``scalelab up`` makes its
    state folder's ``homes/``, the spawner makes ``<home_root>/<user>`` with its parents at a
    first login); ``spawner`` names the section of the setting. Looks only; creates nothing.
    Never raises."""
    if not home_root:
        return Check("Homes", OK, f"system users' homes (c.{spawner}.home_root is empty)")
    fix = (
        f"Create {home_root} (mkdir -p {shlex.quote(home_root)}) and make it writable by the "
        f"hub's user, or set c.{spawner}.home_root."
    )
    home = Path(home_root)
    if os.path.lexists(home):
        problem = _folder_problem(home)
        if problem:
            return Check("Homes", FAIL, f"{home_root} is not writable: {problem}", fix)
        return Check("Homes", OK, f"{home_root} is writable")
    base = _nearest_existing(home.parent)
    problem = _folder_problem(base)
    if problem:
        return Check("Homes", FAIL, f"{home_root} cannot be created: {problem}", fix)
    return Check(
        "Homes",
        OK,
        f"{home_root} does not exist yet and will be created ({base} is writable)",
    )


def check_gpus(
    declared: Sequence[Mapping[str, Any]], excluded: Sequence[str], spawner: str = "ScaleLabSpawner"
) -> Check:
    """NVML and the GPU inventory, as the spawner builds it; no GPU is a warning. ``spawner``
    names the section of the settings."""
    from scalelab.common.gpu_inventory import declared_inventory, discover_nvml, exclude

    try:
        inventory = declared_inventory(declared) if declared else discover_nvml()
    except ValueError as exc:
        return Check("GPUs", FAIL, str(exc), f"Fix c.{spawner}.declared_gpus.")
    inventory = exclude(inventory, excluded)
    if not inventory.gpus:
        return Check(
            "GPUs",
            WARN,
            inventory.describe(),
            "Fine on a CPU machine. For GPUs: install the NVIDIA driver (NVML), and check "
            f"c.{spawner}.exclude_gpus.",
        )
    return Check("GPUs", OK, inventory.describe())


def check_proxy(command: Sequence[str] | None) -> Check:
    """configurable-http-proxy is installed and answers ``--version``."""
    fix = "Install it with ./install.sh (npm ci), or npm install -g configurable-http-proxy."
    if not command:
        return Check("Proxy", FAIL, "configurable-http-proxy was not found", fix)
    try:
        status, out = _run([*command, "--version"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("Proxy", FAIL, f"{command[0]} does not run: {exc}", fix)
    if status != 0:
        return Check("Proxy", FAIL, f"{command[0]} --version failed: {out.strip()[:200]}", fix)
    return Check("Proxy", OK, f"configurable-http-proxy {out.strip()} at {command[0]}")


@dataclass(frozen=True)
class HubPort:
    """A TCP port the hub's processes will listen on (see :func:`hub_ports`).

    Attributes
    ----------
    name
        The check's name: ``"Port"`` (the public one, the proxy's), ``"Hub port"`` or
        ``"Proxy API port"``.
    ip
        The address (``""``: every interface).
    port
        The port; 0 when nothing fixes it and ``scalelab up`` picks a free one at start.
    setting
        The setting that fixes it, e.g. ``"c.JupyterHub.hub_port"``.
    source
        The config file that set it; ``""`` when it comes from ``scalelab up`` itself
        (``--ip`` / ``--port``).
    started
        False when the hub does not start what listens there (a proxy with
        ``c.ConfigurableHTTPProxy.should_start = False``).
    """

    name: str
    ip: str
    port: int
    setting: str
    source: str = ""
    started: bool = True


#: How a check names the other ports of the hub, in a clash.
_PORT_WORDS = {
    "Port": "public port",
    "Hub port": "hub's port",
    "Proxy API port": "proxy's API port",
}


#: The setting of the address that goes with a port setting (a URL holds both).
_ADDRESS_SETTINGS = {
    "c.JupyterHub.port": "c.JupyterHub.ip",
    "c.JupyterHub.hub_port": "c.JupyterHub.hub_ip",
}


def _is_set(cfg: Any, section: str, key: str) -> bool:
    """Whether the traitlets ``Config`` ``cfg`` sets ``section.key`` (without adding it)."""
    return cfg is not None and section in cfg and key in cfg[section]


def _url_port(url: str) -> tuple[str, int]:
    """(host, port) of an ``http(s)://`` URL, the scheme's port when none is given; port 0
    for a URL with no TCP port (``http+unix://``) or one that cannot be read."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if "+unix" in parts.scheme:
        return "", 0
    try:
        port = parts.port
    except ValueError:
        return parts.hostname or "", 0
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname or "", port


def hub_ports(c: Any, operator: Any = None, config_file: str | None = None) -> tuple[HubPort, ...]:
    """The ports the hub configured by ``c`` will listen on: the public port (the proxy's:
    ``c.JupyterHub.bind_url`` where the operator's file sets it, else ``ip`` and ``port``),
    the hub's own port and the proxy's API port, in that order.

    Parameters
    ----------
    c
        The merged configuration (:func:`_hub_config`, with the operator's file over it), in
        which ``scalelab up``'s picked ports are 0: ``c.JupyterHub.hub_port`` and the port of
        ``c.ConfigurableHTTPProxy.api_url`` are then fixed only by the operator's file.
    operator
        The operator's own ``Config`` (to tell where the public port came from), or None.
    config_file
        Its path, named in the fixes.
    """
    mine = str(config_file or "")
    hub, proxy = c.JupyterHub, c.ConfigurableHTTPProxy
    started = bool(_get(proxy, "should_start", True))
    if _is_set(operator, "JupyterHub", "bind_url"):  # JupyterHub's own: it wins over ip, port
        ip, port = _url_port(hub["bind_url"])
        public = HubPort("Port", ip, port, "c.JupyterHub.bind_url", mine, started)
    else:
        public = HubPort(
            "Port",
            _get(hub, "ip", ""),
            int(_get(hub, "port", 8000)),
            "c.JupyterHub.port",
            mine if _is_set(operator, "JupyterHub", "port") else "",
            started,
        )
    if _get(hub, "hub_bind_url", ""):
        ip, port = _url_port(hub["hub_bind_url"])
        own = HubPort("Hub port", ip, port, "c.JupyterHub.hub_bind_url", mine)
    else:
        ip, port = _get(hub, "hub_ip", "127.0.0.1"), int(_get(hub, "hub_port", 0))
        own = HubPort("Hub port", ip, port, "c.JupyterHub.hub_port", mine)
    ip, port = _url_port(_get(proxy, "api_url", "")) if _get(proxy, "api_url", "") else ("", 0)
    api = HubPort("Proxy API port", ip, port, "c.ConfigurableHTTPProxy.api_url", mine, started)
    return (public, own, api)


def _same_address(a: str, b: str) -> bool:
    """Whether listening on ``a`` and on ``b`` with one port number clash."""
    wildcard = {"", "0.0.0.0", "::"}
    return a == b or a in wildcard or b in wildcard


def check_ports(ports: Sequence[HubPort], our_pids: set[int]) -> list[Check]:
    """One check per port of :func:`hub_ports`: fine when ``scalelab up`` picks it, when the
    hub does not start its listener, when it is free or held by this state folder's running
    hub (``our_pids``); failed when another program holds it (named with its pid and command)
    or when two of the hub's own ports share a number. Never raises."""
    checks = []
    for i, p in enumerate(ports):
        if not p.started:
            detail = (
                f"{p.ip or '*'}:{p.port} belongs to a proxy the hub does not start "
                "(c.ConfigurableHTTPProxy.should_start = False)"
            )
            checks.append(Check(p.name, OK, detail))
            continue
        if p.port == 0:
            detail = f"scalelab up picks a free port at start ({p.setting} is not set)"
            checks.append(Check(p.name, OK, detail))
            continue
        clash = next(
            (q for q in ports[:i] if q.started and q.port == p.port and _same_address(q.ip, p.ip)),
            None,
        )
        if clash is not None:
            where = f" in {p.source}" if p.source else ""
            checks.append(
                Check(
                    p.name,
                    FAIL,
                    f"{p.setting}: {p.port} is also the {_PORT_WORDS[clash.name]} "
                    f"({clash.setting}); the hub cannot listen on both",
                    f"Change {p.setting}{where}: each of the hub's ports needs its own number.",
                )
            )
            continue
        checks.append(
            check_port(p.ip, p.port, our_pids, name=p.name, setting=p.setting, source=p.source)
        )
    return checks


def check_port(
    ip: str,
    port: int,
    our_pids: set[int],
    *,
    name: str = "Port",
    setting: str = "c.JupyterHub.port",
    source: str = "",
) -> Check:
    """``ip:port`` is free, or held by our own running hub (``our_pids``); when another program
    holds it, the failure names it (pid and command) and the fix names ``setting`` and the
    config file ``source`` that fixed it (``""``: ``scalelab up --port``). Never raises."""
    from scalelab.commands.up import UpError, check_port_free, listener_pid

    where = f"{ip or '*'}:{port}"
    try:
        check_port_free(ip or "0.0.0.0", port)
    except UpError as exc:
        message = str(exc)
        if message.startswith("cannot listen"):  # not EADDRINUSE: an address not of this host
            address = _ADDRESS_SETTINGS.get(setting, setting)
            change = f"{address} in {source}" if source else f"scalelab up --ip, or {address}"
            return Check(name, FAIL, message, f"Use an address of this machine: {change}.")
        holder = listener_pid(port)
        if holder is not None and holder in our_pids:
            return Check(name, OK, f"{where} is served by this state folder's hub")
        if source:
            fix = f"Stop that program, or change {setting} in {source}"
            if setting != "c.JupyterHub.port":
                fix += " (or remove it: scalelab up then picks a free port)"
            fix += "."
        else:
            fix = (
                "Stop that program, or choose another port (scalelab up --port, c.JupyterHub.port)."
            )
        return Check(name, FAIL, message.split(". Stop it")[0], fix)  # names the holder
    return Check(name, OK, f"{where} is free")


def sqlite_path(db_url: str, state_dir: Path | None) -> Path | None:
    """The file of a ``sqlite://`` database URL (relative ones against ``state_dir``, the
    hub's working folder), None for an in-memory one; raises ValueError for another URL."""
    match = re.match(r"sqlite(?:\+\w+)?://(.*)$", db_url)
    if not match:
        raise ValueError(f"not a SQLite URL: {db_url}")
    rest = match.group(1).split("?")[0]
    path = rest[1:] if rest.startswith("/") else rest
    if path in ("", ":memory:"):
        return None
    return (state_dir or Path.cwd()) / path  # an absolute path stays as it is


def check_database(db_url: str, state_dir: Path | None = None) -> Check:
    """The hub database: a SQLite file the hub can write (or create), or a server that answers.

    SQLite is looked at, never opened: a database is not created, locked or changed; a missing
    one is fine when its folder is writable, or is ``state_dir`` (or one of the folders
    ``scalelab up`` makes in it) under a writable folder. A relative path is the hub's: under
    ``state_dir``, its working folder. Never raises.
    """
    fix = "Check c.JupyterHub.db_url: the folder must be writable, the server reachable."
    if db_url.startswith("sqlite"):
        return _check_sqlite(db_url, state_dir, fix)
    try:
        import sqlalchemy

        def probe() -> None:
            engine = sqlalchemy.create_engine(db_url)
            try:
                with engine.connect() as conn:
                    conn.execute(sqlalchemy.text("SELECT 1"))
            finally:
                engine.dispose()

        _with_timeout(probe, CHECK_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        return Check("Database", FAIL, f"{_redact(db_url)}: no answer", fix)
    except Exception as exc:  # noqa: BLE001 -- drivers raise their own errors
        detail = _redact(f"{db_url}: {type(exc).__name__}: {str(exc)[:200]}")
        return Check("Database", FAIL, detail, fix)
    return Check("Database", OK, f"{_redact(db_url)} answers")


def _check_sqlite(db_url: str, state_dir: Path | None, fix: str) -> Check:
    try:
        path = sqlite_path(db_url, state_dir)
    except ValueError as exc:
        return Check("Database", FAIL, str(exc), fix)
    if path is None:
        return Check("Database", OK, "SQLite in memory (the hub forgets its users at each stop)")
    if os.path.lexists(path):
        if not path.is_file():
            return Check("Database", FAIL, f"{path} is not a file", fix)
        try:
            with open(path, "rb") as db:
                header = db.read(16)
        except OSError as exc:
            return Check("Database", FAIL, f"{path} cannot be read: {exc.strerror or exc}", fix)
        if header and header != b"SQLite format 3\x00":
            return Check("Database", FAIL, f"{path} is not a SQLite database", fix)
        if not os.access(path, os.R_OK | os.W_OK):
            return Check("Database", FAIL, f"{path} is not writable by this user", fix)
        problem = _folder_problem(path.parent)  # SQLite writes its journal beside the file
        if problem:
            return Check("Database", FAIL, f"{path} is not writable: {problem}", fix)
        return Check("Database", OK, f"SQLite {path} is writable")
    folder = path.parent
    if os.path.lexists(folder):
        problem = _folder_problem(folder)
        if problem:
            return Check("Database", FAIL, f"{path} is not writable: {problem}", fix)
        return Check("Database", OK, f"SQLite {path} is writable (the hub creates it)")
    ours = state_dir is not None and folder in {
        state_dir,
        *(state_dir / name for name in StateFolder.SUBFOLDERS),
    }
    if not ours:
        return Check(
            "Database",
            FAIL,
            f"{path} cannot be created: {folder} does not exist",
            f"mkdir -p {shlex.quote(str(folder))} (as the hub's user), or change "
            "c.JupyterHub.db_url.",
        )
    base = _nearest_existing(folder)
    problem = _folder_problem(base)
    if problem:
        return Check("Database", FAIL, f"{path} cannot be created: {problem}", fix)
    return Check(
        "Database", OK, f"SQLite {path}: scalelab up creates {folder} ({base} is writable)"
    )


def _redact(url: str) -> str:
    """A database URL without its password."""
    return re.sub(r"://([^:/@\s]+):[^@\s]*@", r"://\1:***@", url)


def python_env() -> dict[str, str]:
    """The environment servers get: this one, with this Python's bin folder first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@dataclass(frozen=True)
class DoctorSettings:
    """What the checks look at, read from the hub's configuration (see :func:`load_settings`).

    ``ip`` and ``port`` are the public address; ``ports`` every port the hub will listen on
    (:func:`hub_ports`; empty: the public one only). ``spawner`` names the spawner class whose
    settings these are; ``slurm``, for a Slurm spawner, the arguments of
    :func:`~scalelab.commands.doctor_slurm.slurm_checks` but ``env``; ``kube``, for a
    KubeSpawner, those of :func:`~scalelab.commands.doctor_kube.kube_checks`.
    """

    state_dir: str
    ip: str
    port: int
    store_url: str
    store_options: dict
    home_root: str
    spark_master: str
    db_url: str
    declared_gpus: list
    exclude_gpus: list
    ports: tuple[HubPort, ...] = ()
    hadoop_conf_dir: str = ""
    kernelspec_path: tuple[str, ...] = ()
    spawner: str = "ScaleLabSpawner"
    slurm: dict | None = None
    kube: dict | None = None
    system_user_prefix: str = "jupyter-"


def _get(section: Any, key: str, default: Any) -> Any:
    return section[key] if key in section else default


def _hub_config(
    state_dir: Path, ip: str, port: int, store_url: str | None, hadoop: bool = False
) -> Any:
    """``scalelab up``'s embedded configuration for ``state_dir`` (a traitlets ``Config``),
    ``store_url`` made absolute as ``scalelab up`` makes it; the hub's and the proxy API's
    ports, which ``scalelab up`` picks at start, are 0. ``hadoop``: ``scalelab up --hadoop``'s,
    with the test cluster's ports saved in the state folder.

    Raises
    ------
    UpError
        ``hadoop``, and ``scalelab up --hadoop`` never ran on ``state_dir`` (no ports saved).
    """
    from scalelab.commands.state_files import default_store_url
    from scalelab.commands.up import absolute_store_url
    from scalelab.commands.up_config import UpSettings, embedded_config
    from scalelab.commands.up_hadoop import saved_service

    service = saved_service(StateFolder(state_dir)) if hadoop else None
    settings = UpSettings(
        state_dir=str(state_dir),
        store_url=absolute_store_url(store_url) if store_url else default_store_url(state_dir),
        proxy_command=[],
        hub_port=0,
        proxy_api_port=0,
        ip=ip,
        port=port,
        hadoop=service.to_dict() if service else None,
    )
    return embedded_config(settings, password="doctor-does-not-log-in")


def load_settings(
    state_dir: Path,
    *,
    ip: str = "127.0.0.1",
    port: int = 8000,
    store_url: str | None = None,
    config_file: str | None = None,
    hadoop: bool = False,
) -> DoctorSettings:
    """``scalelab up``'s configuration for ``state_dir``, with ``config_file`` loaded after it.

    Reads only: a relative ``store_url`` is made absolute against this folder (as
    ``scalelab up`` does), ``state_dir`` is resolved, neither need exist.

    Raises
    ------
    FileNotFoundError
        ``config_file`` does not exist.
    scalelab.hub_ext.hub.config_check.ConfigProblem
        It does not compile, or fails while it runs.
    """
    from scalelab.commands.up import absolute_store_url
    from scalelab.hub_ext.hub.config_check import load_config_file
    from scalelab.spawner.system_users import DEFAULT_PREFIX
    from scalelab.spawner.validation import spawner_settings

    state_dir = state_dir.expanduser().resolve()
    c = _hub_config(state_dir, ip, port, store_url, hadoop)
    operator = load_config_file(config_file) if config_file else None
    if operator is not None:
        c.merge(operator)
    spawner_class = _spawner_class(c)
    spawner = spawner_settings(c, spawner_class)
    return DoctorSettings(
        state_dir=str(state_dir),
        ip=_get(c.JupyterHub, "ip", ip),
        port=int(_get(c.JupyterHub, "port", port)),
        store_url=absolute_store_url(store_url) if store_url else _get(spawner, "store_url", ""),
        store_options=dict(_get(spawner, "store_options", {})),
        home_root=_get(spawner, "home_root", ""),
        spark_master=_get(spawner, "spark_master", DEFAULT_SPARK_MASTER),
        db_url=_get(c.JupyterHub, "db_url", "sqlite:///jupyterhub.sqlite"),
        declared_gpus=list(_get(spawner, "declared_gpus", [])),
        exclude_gpus=list(_get(spawner, "exclude_gpus", [])),
        ports=hub_ports(c, operator, config_file),
        hadoop_conf_dir=_get(spawner, "hadoop_conf_dir", ""),
        kernelspec_path=tuple(_get(spawner, "kernelspec_path", ())),
        spawner=spawner_class.__name__,
        slurm=_slurm_settings(spawner_class, spawner, _get(c.Authenticator, "allowed_users", ())),
        kube=_kube_settings(spawner_class, spawner),
        system_user_prefix=_get(spawner, "system_user_prefix", DEFAULT_PREFIX),
    )


def _spawner_class(c: Any) -> type:
    """The configured spawner class; ScaleLab's local one where it cannot be loaded (the
    configuration check says why)."""
    from scalelab.hub_ext.hub.config_check import ConfigProblem, spawner_class_of
    from scalelab.spawner.local import ScaleLabSpawner

    try:
        return spawner_class_of(c)
    except ConfigProblem:
        return ScaleLabSpawner


def _slurm_settings(
    spawner_class: type, spawner: Mapping[str, Any], allowed_users: Any
) -> dict | None:
    """What the Slurm checks read, for a Slurm spawner (the student the ``exec_prefix`` is
    tried as: the first of ``allowed_users``, or none); else None."""
    from scalelab.spawner.slurm import ScaleLabSlurmSpawner

    if not issubclass(spawner_class, ScaleLabSlurmSpawner):
        return None
    from scalelab.commands.doctor_slurm import job_partitions

    traits = spawner_class.class_traits()
    profiles = list(_get(spawner, "profiles", traits["profiles"].default()))
    return {
        "exec_prefix": str(_get(spawner, "exec_prefix", traits["exec_prefix"].default_value)),
        "args": list(_get(spawner, "args", [])),
        "environment": {k: str(v) for k, v in dict(_get(spawner, "environment", {})).items()},
        "partitions": job_partitions(
            profiles,
            dict(_get(spawner, "slurm_profiles", {})),
            str(_get(spawner, "slurm_partition", "")),
        ),
        "student": min(allowed_users or [""]),
        "memory_limits": bool(_get(spawner, "mem_limit", None))
        or any(p.get("mem_limit") for p in profiles),
    }


def _kube_settings(spawner_class: type, spawner: Mapping[str, Any]) -> dict | None:
    """What the Kubernetes checks read, for a KubeSpawner; else None."""
    from scalelab.commands.doctor_kube import kube_settings

    names = {cls.__name__ for cls in spawner_class.__mro__}
    return kube_settings(spawner) if "KubeSpawner" in names else None


def check_configuration(
    state_dir: Path,
    *,
    ip: str = "127.0.0.1",
    port: int = 8000,
    store_url: str | None = None,
    config_file: str | None = None,
    hadoop: bool = False,
) -> Check:
    """The configuration ``scalelab up`` would start the hub with: ``config_file`` compiles and
    runs, and passes the hub's own start-up validation (the same call ``scalelab up`` makes:
    :func:`scalelab.hub_ext.hub.config_check.check_hub_config`); run by root, where students
    would get system users (ScaleLab and the state folder reachable by other users), also that
    other users cannot read it (:func:`scalelab.commands.state_modes.check_operator_config`), as
    ``scalelab up`` then requires.

    Raises
    ------
    FileNotFoundError
        ``config_file`` does not exist.
    """
    from scalelab.commands.identity import blocked_for_others, install_paths
    from scalelab.commands.state_modes import check_operator_config
    from scalelab.hub_ext.hub.config_check import ConfigProblem, check_hub_config

    state_dir = state_dir.expanduser().resolve()
    problem = None
    if config_file and os.geteuid() == 0:
        # Run by root, scalelab up gives students system users (if they can reach ScaleLab and
        # the state folder), and then refuses a config file they could read.
        reachable = blocked_for_others([*install_paths(), state_dir.parent]) is None
        problem = check_operator_config(config_file) if reachable else None
    if problem:
        return Check(
            "Configuration",
            FAIL,
            problem.split(": chmod")[0],
            f"chmod 600 {config_file} (or run scalelab up --shared-identity, a single-user trial)",
        )
    try:
        check_hub_config(_hub_config(state_dir, ip, port, store_url, hadoop), config_file)
    except ConfigProblem as exc:
        return Check("Configuration", FAIL, exc.message, exc.fix)
    what = f"ScaleLab's defaults and {config_file}" if config_file else "ScaleLab's defaults"
    return Check("Configuration", OK, f"{what}: loaded and valid")


def doctor_checks(
    state_dir: Path,
    *,
    ip: str = "127.0.0.1",
    port: int = 8000,
    store_url: str | None = None,
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    quick: bool = False,
    student: str = "",
    hadoop: bool = False,
) -> list[Check]:
    """Every check, the configuration first; the others on the operator's settings, or on
    ScaleLab's defaults when ``config_file`` cannot be loaded at all. ``quick``: the kernels'
    programs and modules are looked at, the kernels not started (seconds saved). ``student``:
    whom a Slurm spawner's ``exec_prefix`` is tried as (default: the first allowed user).
    ``hadoop``: the configuration of ``scalelab up --hadoop`` on ``state_dir`` (the store on the
    test cluster's HDFS, Spark on its YARN: checked while it runs).

    Raises
    ------
    FileNotFoundError
        ``config_file`` does not exist.
    UpError
        ``hadoop``, and ``scalelab up --hadoop`` never ran on ``state_dir``.
    """
    from scalelab.hub_ext.hub.config_check import ConfigProblem

    where = {"ip": ip, "port": port, "store_url": store_url, "hadoop": hadoop}
    config = check_configuration(state_dir, config_file=config_file, **where)
    try:
        settings = load_settings(state_dir, config_file=config_file, **where)
    except ConfigProblem:  # already reported by the Configuration check
        settings = load_settings(state_dir, **where)
    if student and settings.slurm is not None:
        settings = replace(settings, slurm={**settings.slurm, "student": student})
    return [config, *run_checks(settings, env, start_kernels=not quick)]


def hub_pids(state_dir: Path) -> set[int]:
    """Pids of the ``scalelab up`` that holds ``state_dir``'s lock and of its descendants."""
    import json

    import psutil

    try:
        owner = json.loads(StateFolder(Path(state_dir)).lock.read_text() or "{}")
        proc = psutil.Process(int(owner["pid"]))
        return {proc.pid, *(p.pid for p in proc.children(recursive=True))}
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return set()


def cluster_env(env: Mapping[str, str], s: DoctorSettings) -> dict[str, str]:
    """``env`` as the servers' Hadoop clients see it: ``HADOOP_CONF_DIR`` and ``YARN_CONF_DIR``
    are ``c.ScaleLabSpawner.hadoop_conf_dir`` where it is set (as the spawner sets them)."""
    if not s.hadoop_conf_dir:
        return dict(env)
    return {**env, "HADOOP_CONF_DIR": s.hadoop_conf_dir, "YARN_CONF_DIR": s.hadoop_conf_dir}


def run_checks(
    s: DoctorSettings, env: Mapping[str, str] | None = None, start_kernels: bool = True
) -> list[Check]:
    """Every check, in order, on ``s`` with the servers' environment ``env``; each looks and
    none creates or changes a file (kernels started with ``start_kernels`` run in a temporary
    folder, removed). Never raises for a broken host."""
    from scalelab.commands.doctor_hadoop import hadoop_checks
    from scalelab.commands.doctor_kernels import check_kernels
    from scalelab.commands.doctor_kube import kube_checks
    from scalelab.commands.doctor_slurm import slurm_checks
    from scalelab.commands.up import UpError, find_proxy

    env = python_env() if env is None else env
    try:
        proxy: list[str] | None = find_proxy()
    except UpError:
        proxy = None
    return [
        check_java(env),
        check_spark(env, s.spark_master),
        check_store(s.store_url, s.store_options, spawner=s.spawner),
        check_kernels(
            s.kernelspec_path,
            str(StateFolder(Path(s.state_dir)).kernelspecs),
            start_env=env if start_kernels else None,
        )
        if s.kube is None
        else Check("Kernels", OK, f"in the servers' image (c.{s.spawner}.image), not looked at"),
        *hadoop_checks(s.store_url, s.store_options, s.spark_master, cluster_env(env, s)),
        *(slurm_checks(**s.slurm, env=env) if s.slurm else []),
        *(kube_checks(**s.kube) if s.kube else []),
        check_homes(s.home_root, s.spawner),
        check_gpus(s.declared_gpus, s.exclude_gpus, s.spawner),
        check_proxy(proxy),
        *check_ports(
            s.ports or (HubPort("Port", s.ip, s.port, "c.JupyterHub.port"),),
            hub_pids(Path(s.state_dir)),
        ),
        check_database(s.db_url, Path(s.state_dir)),
    ]
