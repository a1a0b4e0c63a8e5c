"""``scalelab doctor``: check what a course hub needs before students arrive.

Each check is a function that returns a :class:`Check` (name, status, detail, fix) and never
raises for a broken host: Java, Spark, the course store and the homes folder, NVML and the GPU
inventory, configurable-http-proxy, the hub's port and the hub database, after the
configuration itself (the operator's file compiles, runs and passes the hub's start-up
validation). The checks read the hub's configuration (``scalelab up``'s defaults, plus the
operator's ``jupyterhub_config.py`` given with ``--config``), so they test what the hub will
actually use.

Statuses: ``ok``; ``warn`` (the hub runs, with less: e.g. no GPU on a CPU machine); ``fail``
(the hub or students' kernels will not work). :func:`exit_status` is 1 when any check failed.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab.commands.state_files import StateFolder
from scalelab.kernels.spark_defaults import DEFAULT_SPARK_MASTER

OK, WARN, FAIL = "ok", "warn", "fail"
#: Oldest Java that Spark 4 runs on.
MIN_JAVA = 17
#: Seconds a check may wait on an external program or a remote store.
CHECK_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Check:
    """The outcome of one check.

    Attributes
    ----------
    name
        What was checked, e.g. ``"Java"``.
    status
        ``"ok"``, ``"warn"`` or ``"fail"``.
    detail
        What was found (a version, a path, the error).
    fix
        What to do about a warning or failure; ``""`` when ok.
    """

    name: str
    status: str
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        """False only for a failure (a warning is not one)."""
        return self.status != FAIL


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
    store_url: str, store_options: Mapping[str, Any], timeout_s: float = CHECK_TIMEOUT_S
) -> Check:
    """The course store: it opens and its root can be listed within ``timeout_s``."""
    from scalelab.store import open_store

    fix = (
        "Check c.ScaleLabSpawner.store_url and store_options (or --store): the server must be "
        "up and reachable from the hub's machine, and the credentials valid."
    )
    if not store_url:
        return Check("Course store", FAIL, "no store URL is configured", fix)

    def probe() -> int:
        fs = open_store(store_url, store_options)
        return len(fs.ls("", detail=False))

    try:
        entries = _with_timeout(probe, timeout_s)
    except concurrent.futures.TimeoutError:
        return Check("Course store", FAIL, f"{store_url}: no answer in {timeout_s:.0f} s", fix)
    except Exception as exc:  # noqa: BLE001 -- each fsspec back end raises its own errors
        detail = f"{store_url} cannot be read: {type(exc).__name__}: {str(exc)[:200]}"
        return Check("Course store", FAIL, detail, fix)
    return Check("Course store", OK, f"{store_url} is reachable ({entries} entries at its root)")


def check_homes(home_root: str) -> Check:
    """The folder of users' homes exists (or can be created) and is writable."""
    if not home_root:
        return Check("Homes", OK, "system users' homes (c.ScaleLabSpawner.home_root is empty)")
    fix = f"Create {home_root} and make it writable by the hub's user, or set home_root."
    try:
        Path(home_root).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=home_root, prefix=".scalelab-doctor-"):
            pass
    except OSError as exc:
        return Check("Homes", FAIL, f"{home_root} is not writable: {exc.strerror or exc}", fix)
    return Check("Homes", OK, f"{home_root} is writable")


def check_gpus(declared: Sequence[Mapping[str, Any]], excluded: Sequence[str]) -> Check:
    """NVML and the GPU inventory, as the spawner builds it; no GPU is a warning."""
    from scalelab.spawner.inventory import declared_inventory, discover_nvml, exclude

    try:
        inventory = declared_inventory(declared) if declared else discover_nvml()
    except ValueError as exc:
        return Check("GPUs", FAIL, str(exc), "Fix c.ScaleLabSpawner.declared_gpus.")
    inventory = exclude(inventory, excluded)
    if not inventory.gpus:
        return Check(
            "GPUs",
            WARN,
            inventory.describe(),
            "Fine on a CPU machine. For GPUs: install the NVIDIA driver (NVML), and check "
            "c.ScaleLabSpawner.exclude_gpus.",
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


def check_port(ip: str, port: int, our_pids: set[int]) -> Check:
    """The hub's public port is free, or held by our own running hub (``our_pids``)."""
    from scalelab.commands.up import UpError, check_port_free, listener_pid

    try:
        check_port_free(ip, port)
    except UpError as exc:
        holder = listener_pid(port)
        if holder is not None and holder in our_pids:
            return Check("Port", OK, f"{ip}:{port} is served by this state folder's hub")
        return Check(
            "Port",
            FAIL,
            str(exc).split(". Stop it")[0],  # names the holder: pid and command
            "Stop that program, or choose another port (scalelab up --port, c.JupyterHub.port).",
        )
    return Check("Port", OK, f"{ip}:{port} is free")


def check_database(db_url: str) -> Check:
    """The hub database: a SQLite file that can be written, or a server that answers."""
    fix = "Check c.JupyterHub.db_url: the folder must be writable, the server reachable."
    if db_url.startswith("sqlite:///"):
        path = Path(db_url[len("sqlite:///") :])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            existed = path.exists()
            with sqlite3.connect(path, timeout=5) as db:
                db.execute("BEGIN IMMEDIATE")  # takes the write lock: proves it is writable
                db.rollback()
            db.close()
            if not existed:
                path.unlink()
        except (OSError, sqlite3.Error) as exc:
            return Check("Database", FAIL, f"{path} is not writable: {exc}", fix)
        return Check("Database", OK, f"SQLite {path} is writable")
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


def _redact(url: str) -> str:
    """A database URL without its password."""
    return re.sub(r"://([^:/@\s]+):[^@\s]*@", r"://\1:***@", url)


def exit_status(checks: Sequence[Check]) -> int:
    """0 when no check failed (warnings allowed), else 1."""
    return 0 if all(c.ok for c in checks) else 1


def format_checks(checks: Sequence[Check]) -> str:
    """The report: one line per check, its fix indented below a warning or failure."""
    marks = {OK: "[ ok ]", WARN: "[warn]", FAIL: "[FAIL]"}
    lines = []
    for c in checks:
        lines.append(f"{marks[c.status]} {c.name}: {c.detail}")
        if c.fix and c.status != OK:
            lines.append(f"       fix: {c.fix}")
    failed = [c.name for c in checks if not c.ok]
    lines.append(
        f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "All checks passed."
    )
    return "\n".join(lines)


def python_env() -> dict[str, str]:
    """The environment servers get: this one, with this Python's bin folder first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@dataclass(frozen=True)
class DoctorSettings:
    """What the checks look at, read from the hub's configuration (see :func:`load_settings`)."""

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


def _get(section: Any, key: str, default: Any) -> Any:
    return section[key] if key in section else default


def _hub_config(state_dir: Path, ip: str, port: int, store_url: str | None) -> Any:
    """``scalelab up``'s embedded configuration for ``state_dir`` (a traitlets ``Config``)."""
    from scalelab.commands.state_files import default_store_url
    from scalelab.commands.up_config import UpSettings, embedded_config

    settings = UpSettings(
        state_dir=str(state_dir),
        store_url=store_url or default_store_url(state_dir),
        proxy_command=[],
        hub_port=0,
        proxy_api_port=0,
        ip=ip,
        port=port,
    )
    return embedded_config(settings, password="doctor-does-not-log-in")


def load_settings(
    state_dir: Path,
    *,
    ip: str = "127.0.0.1",
    port: int = 8000,
    store_url: str | None = None,
    config_file: str | None = None,
) -> DoctorSettings:
    """``scalelab up``'s configuration for ``state_dir``, with ``config_file`` loaded after it.

    Raises
    ------
    FileNotFoundError
        ``config_file`` does not exist.
    scalelab.hub_ext.hub.config_check.ConfigProblem
        It does not compile, or fails while it runs.
    """
    from scalelab.hub_ext.hub.config_check import load_config_file

    state_dir = state_dir.expanduser().resolve()
    c = _hub_config(state_dir, ip, port, store_url)
    if config_file:
        c.merge(load_config_file(config_file))
    spawner = c.ScaleLabSpawner
    return DoctorSettings(
        state_dir=str(state_dir),
        ip=_get(c.JupyterHub, "ip", ip),
        port=int(_get(c.JupyterHub, "port", port)),
        store_url=store_url or _get(spawner, "store_url", ""),
        store_options=dict(_get(spawner, "store_options", {})),
        home_root=_get(spawner, "home_root", ""),
        spark_master=_get(spawner, "spark_master", DEFAULT_SPARK_MASTER),
        db_url=_get(c.JupyterHub, "db_url", "sqlite:///jupyterhub.sqlite"),
        declared_gpus=list(_get(spawner, "declared_gpus", [])),
        exclude_gpus=list(_get(spawner, "exclude_gpus", [])),
    )


def check_configuration(
    state_dir: Path,
    *,
    ip: str = "127.0.0.1",
    port: int = 8000,
    store_url: str | None = None,
    config_file: str | None = None,
) -> Check:
    """The configuration ``scalelab up`` would start the hub with: ``config_file`` compiles and
    runs, and passes the hub's own start-up validation (the same call ``scalelab up`` makes:
    :func:`scalelab.hub_ext.hub.config_check.check_hub_config`); run by root, also that other
    users cannot read it (:func:`scalelab.commands.state_modes.check_operator_config`), as
    ``scalelab up`` run by root requires.

    Raises
    ------
    FileNotFoundError
        ``config_file`` does not exist.
    """
    from scalelab.commands.state_modes import check_operator_config
    from scalelab.hub_ext.hub.config_check import ConfigProblem, check_hub_config

    state_dir = state_dir.expanduser().resolve()
    problem = check_operator_config(config_file) if config_file and os.geteuid() == 0 else None
    if problem:  # scalelab up run by root gives students system users, and refuses the file
        return Check(
            "Configuration",
            FAIL,
            problem.split(": chmod")[0],
            f"chmod 600 {config_file} (or run scalelab up --shared-identity, a single-user trial)",
        )
    try:
        check_hub_config(_hub_config(state_dir, ip, port, store_url), config_file)
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
) -> list[Check]:
    """Every check, the configuration first; the others on the operator's settings, or on
    ScaleLab's defaults when ``config_file`` cannot be loaded at all.

    Raises
    ------
    FileNotFoundError
        ``config_file`` does not exist.
    """
    from scalelab.hub_ext.hub.config_check import ConfigProblem

    where = {"ip": ip, "port": port, "store_url": store_url}
    config = check_configuration(state_dir, config_file=config_file, **where)
    try:
        settings = load_settings(state_dir, config_file=config_file, **where)
    except ConfigProblem:  # already reported by the Configuration check
        settings = load_settings(state_dir, **where)
    return [config, *run_checks(settings, env)]


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


def run_checks(s: DoctorSettings, env: Mapping[str, str] | None = None) -> list[Check]:
    """Every check, in order, on ``s`` with the servers' environment ``env``."""
    from scalelab.commands.up import UpError, find_proxy

    env = python_env() if env is None else env
    try:
        proxy: list[str] | None = find_proxy()
    except UpError:
        proxy = None
    return [
        check_java(env),
        check_spark(env, s.spark_master),
        check_store(s.store_url, s.store_options),
        check_homes(s.home_root),
        check_gpus(s.declared_gpus, s.exclude_gpus),
        check_proxy(proxy),
        check_port(s.ip, s.port, hub_pids(Path(s.state_dir))),
        check_database(s.db_url),
    ]
