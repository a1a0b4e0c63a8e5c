"""``scalelab up --hadoop``: the course's cluster path on one machine.

Hadoop's test cluster (``hadoop/testcluster``: HDFS and YARN in one JVM on 127.0.0.1) runs as the
hub's managed service ``scalelab-hadoop`` -- fixed ports in ``<state>/hadoop/ports.json``, data
kept in ``<state>/hadoop/data/``, client configuration in ``<state>/hadoop/conf/``, as the system
user :data:`CLUSTER_USER` when run by root -- with the course store on its HDFS and Spark on its
YARN. A trial of the cluster path: containers share the cluster's user, authentication is simple.
Why: docs/design-notes.md, scalelab.commands.up_hadoop.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shlex
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from scalelab.commands.errors import UpError
from scalelab.commands.identity import blocked_for_others
from scalelab.commands.state_files import StateFolder
from scalelab.common.ports import free_port, port_free

REPO = Path(__file__).resolve().parents[2]
#: The Maven project of the test cluster, and what ``mvn package`` (``install.sh``) makes of it.
PROJECT = REPO / "hadoop" / "testcluster"
JAR = PROJECT / "target" / "scalelab-testcluster.jar"
LIB = PROJECT / "target" / "lib"
MAIN_CLASS = "org.scalelab.testcluster.TestCluster"
#: The fix named when the cluster cannot run here.
BUILD_FIX = "run ./install.sh (it builds hadoop/testcluster with Maven: Java 17 and mvn needed)"

#: The hub service's name (``/hub/api/services``) and, run by root, the system user of the JVM.
SERVICE_NAME = CLUSTER_USER = "scalelab-hadoop"
#: The JVM's heap limit: HDFS, the ResourceManager and the NodeManagers stay near 450 MiB
#: resident; the containers are processes of their own.
HEAP = "512m"
#: NodeManagers (each offers 4 GiB and 2 vcores to containers: ``TestCluster.java``).
NODEMANAGERS = 2
#: The course store's folder on HDFS.
COURSE_ROOT = "/course"
#: Seconds ``scalelab up`` waits for the cluster (about 20 s on 2 idle cores).
READY_TIMEOUT_S = 180.0
#: Executors' and the application master's sizes for the test cluster's NodeManagers: two
#: executors of one core and a 512 MiB heap (containers of 512 + 384 MiB overhead), a small
#: application master. Ops of a real cluster set their own in ``c.ScaleLabSpawner.spark_conf``.
SPARK_CONF = {
    "spark.executor.instances": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.yarn.am.memory": "384m",
}


def missing_reason() -> str | None:
    """Why the test cluster cannot run here, with the fix; None when it can.

    No ``java`` on PATH, or the Maven project not built (no jar, or no Hadoop jars in
    ``target/lib``).
    """
    if shutil.which("java") is None:
        return f"no java on PATH for the Hadoop test cluster: {BUILD_FIX}"
    if not JAR.is_file() or not any(LIB.glob("hadoop-client-minicluster-*.jar")):
        return f"the Hadoop test cluster is not built ({JAR} or {LIB}/ missing): {BUILD_FIX}"
    return None


@dataclass(frozen=True)
class HadoopPorts:
    """The cluster's fixed TCP ports on 127.0.0.1 (``<state>/hadoop/ports.json``)."""

    namenode_rpc: int
    namenode_http: int
    resourcemanager: int
    scheduler: int
    resource_tracker: int
    admin: int
    web: int

    def namenode(self) -> list[int]:
        """``--namenode-ports``: RPC, HTTP (WebHDFS)."""
        return [self.namenode_rpc, self.namenode_http]

    def yarn(self) -> list[int]:
        """``--yarn-ports``: the ResourceManager's RPC, scheduler, resource tracker, admin, web."""
        return [self.resourcemanager, self.scheduler, self.resource_tracker, self.admin, self.web]


@dataclass(frozen=True)
class HadoopService:
    """What the hub's configuration needs of the cluster (kept in ``UpSettings.hadoop``).

    Attributes
    ----------
    folder
        ``<state>/hadoop``: ``ports.json``, ``conf/`` and ``data/`` (the cluster's own, with its
        log ``cluster.log``).
    ports
        The fixed ports.
    user
        The system user the JVM runs as (run by root), or None: the hub's own user.
    superuser_group
        The HDFS superuser group (``dfs.permissions.superusergroup``): the hub's user's primary
        group, so that the hub (and ``scalelab data fetch`` run by the same user) may make
        students' homes and the course's folders.
    """

    folder: str
    ports: HadoopPorts
    user: str | None
    superuser_group: str

    @property
    def conf_dir(self) -> Path:
        """The client configuration the JVM writes once it is up (``HADOOP_CONF_DIR``)."""
        return Path(self.folder) / "conf"

    @property
    def data_dir(self) -> Path:
        """The cluster's data (kept across restarts) and its log."""
        return Path(self.folder) / "data"

    @property
    def store_url(self) -> str:
        """The course store on the cluster's HDFS."""
        return f"hdfs://127.0.0.1:{self.ports.namenode_rpc}{COURSE_ROOT}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for ``UpSettings``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HadoopService:
        """Inverse of :meth:`to_dict`."""
        return cls(**{**data, "ports": HadoopPorts(**data["ports"])})


def ports_file(files: StateFolder) -> Path:
    """``<state>/hadoop/ports.json``."""
    return files.root / "hadoop" / "ports.json"


def load_ports(path: Path) -> HadoopPorts | None:
    """The ports saved in ``path``; None when the file does not exist.

    Raises
    ------
    UpError
        The file is not a JSON object of the seven ports (numbers from 1 to 65535, all
        different); the message names the file and the fix.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UpError(f"cannot read {path}: {exc}; fix it, or delete it for new ports") from None
    names = [f.name for f in fields(HadoopPorts)]
    ok = (
        isinstance(data, dict)
        and sorted(data) == sorted(names)
        and all(isinstance(data[n], int) and 1 <= data[n] <= 65535 for n in names)
        and len({data[n] for n in names}) == len(names)
    )
    if not ok:
        raise UpError(
            f"{path} must name seven different ports (1 to 65535): {', '.join(names)}; "
            "fix it, or delete it for new ports"
        )
    return HadoopPorts(**data)


def choose_ports(path: Path) -> HadoopPorts:
    """The ports saved in ``path``, or free ones saved there now (mode 0644).

    Raises
    ------
    UpError
        From :func:`load_ports`.
    """
    saved = load_ports(path)
    if saved is None:
        chosen: list[int] = []
        while len(chosen) < len(fields(HadoopPorts)):
            port = free_port()
            if port not in chosen:
                chosen.append(port)
        saved = HadoopPorts(*chosen)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(saved), indent=2) + "\n")
        path.chmod(0o644)
    return saved


def saved_service(files: StateFolder) -> HadoopService:
    """The cluster of an earlier ``scalelab up --hadoop`` on ``files`` (for ``scalelab doctor
    --hadoop``; reads only).

    Raises
    ------
    UpError
        No ports were saved there (``scalelab up --hadoop`` never ran), or the file is bad.
    """
    path = ports_file(files)
    ports = load_ports(path)
    if ports is None:
        raise UpError(
            f"{path} does not exist: `scalelab up --hadoop` has not run on {files.root} yet; "
            "start it once (the doctor checks its cluster while it runs)"
        )
    return HadoopService(
        folder=str(path.parent),
        ports=ports,
        user=None,
        superuser_group=grp.getgrgid(os.getegid()).gr_name,
    )


def check_ports(service: HadoopService) -> None:
    """Refuse a fixed port that another program holds (checked once an earlier run's leftovers
    are stopped).

    Raises
    ------
    UpError
        Names the port, its role and the file to edit.
    """
    for name, port in asdict(service.ports).items():
        if not port_free(port):
            raise UpError(
                f"port {port} of the Hadoop test cluster ({name}, fixed in "
                f"{Path(service.folder) / 'ports.json'}) is in use by another program: stop it, "
                "or give the cluster another port in that file"
            )


def prepare(files: StateFolder) -> HadoopService:
    """Everything the cluster needs before the hub starts it: the built cluster, the ports, its
    user (made by root if missing), ``<state>/hadoop/`` (0755), ``conf/`` (0755) and ``data/``
    (0700) owned by that user; the last run's ``conf/`` files removed (the JVM writes them anew
    once it is up: :func:`wait_ready`).

    Raises
    ------
    UpError
        The cluster is not built, ``ports.json`` is malformed, the system user cannot be made or
        cannot reach the cluster's files, or a folder cannot be made; the message names the fix.
    """
    reason = missing_reason()
    if reason:
        raise UpError(reason)
    folder = files.root / "hadoop"
    if os.geteuid() == 0:  # its own user must reach the JVM's jars and the state folder
        blocked = blocked_for_others([JAR.parent, LIB, files.root.parent])
        if blocked:
            raise UpError(
                f"the Hadoop test cluster runs as the system user {CLUSTER_USER}, which cannot "
                f"enter {blocked}: open that folder to others (chmod o+rx), or, if it holds the "
                "state folder, choose a --state-dir others may reach (such as the default "
                "/var/lib/scalelab)"
            )
    ports = choose_ports(ports_file(files))
    owner = _cluster_account(folder / "data")
    service = HadoopService(
        folder=str(folder),
        ports=ports,
        user=owner.pw_name if os.geteuid() == 0 else None,
        superuser_group=grp.getgrgid(os.getegid()).gr_name,
    )
    try:
        folder.chmod(0o755)
        for path, mode in ((service.conf_dir, 0o755), (service.data_dir, 0o700)):
            path.mkdir(mode=mode, exist_ok=True)
            if path.is_symlink():
                raise OSError(f"{path} is a symbolic link")
            os.chown(path, owner.pw_uid, owner.pw_gid)
            path.chmod(mode)
        for old in service.conf_dir.glob("*.xml"):
            old.unlink()
    except OSError as exc:
        raise UpError(f"cannot prepare {folder} for the Hadoop test cluster: {exc}") from None
    return service


def _cluster_account(home: Path) -> pwd.struct_passwd:
    """The account the JVM runs as: :data:`CLUSTER_USER` (made if missing) for root, else this
    process's own."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    from jupyterhub.spawner import SpawnException

    from scalelab.spawner.system_users import ensure_system_user

    try:
        return ensure_system_user(CLUSTER_USER, str(home))
    except SpawnException as exc:
        raise UpError(f"cannot make the Hadoop test cluster's user: {exc}") from None


def service_argv(service: HadoopService, python: str = sys.executable) -> list[str]:
    """The hub service's command: the JVM, under ScaleLab's service guard (it ends with the hub,
    even a killed one), with umask 022 (its ``conf/`` readable by the students' servers), its
    output appended to ``data/cluster.log``."""
    java = shutil.which("java") or "java"
    jvm = [
        java, f"-Xmx{HEAP}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-cp", f"{JAR}:{LIB}/*", MAIN_CLASS,
        "--base-dir", str(service.data_dir / "base"), "--conf-dir", str(service.conf_dir),
        "--superuser-group", service.superuser_group,
        "--yarn", str(NODEMANAGERS),
        "--namenode-ports", ",".join(map(str, service.ports.namenode())),
        "--yarn-ports", ",".join(map(str, service.ports.yarn())),
        "--keep-data", "--until-signal",
    ]  # fmt: skip
    log = service.data_dir / "cluster.log"
    shell = f'umask 022 && exec "$@" >>{shlex.quote(str(log))} 2>&1'
    guard = [python, "-m", "scalelab.hub_ext.services.service_guard", "--"]
    return [*guard, "/bin/sh", "-c", shell, "sh", *jvm]


def service_entry(service: HadoopService) -> dict[str, Any]:
    """The entry of ``c.JupyterHub.services`` (a managed service without a URL: no proxy route,
    nothing of the cluster served through the hub)."""
    entry: dict[str, Any] = {
        "name": SERVICE_NAME,
        "command": service_argv(service),
        "cwd": str(service.data_dir),
    }
    if service.user:
        entry["user"] = service.user
    return entry


def add_service(c: Any, service: HadoopService) -> None:
    """Add the cluster to ``c.JupyterHub.services`` (after the operator's ``--config``, which may
    set that list)."""
    services = [s for s in c.JupyterHub.get("services", []) if s.get("name") != SERVICE_NAME]
    c.JupyterHub.services = [*services, service_entry(service)]


def spawner_config(c: Any, service: HadoopService) -> None:
    """The spawner's settings for the cluster path (an operator's ``--config`` may change them):
    the store on HDFS with each server its student there, Spark on YARN."""
    c.ScaleLabSpawner.store_url = service.store_url
    c.ScaleLabSpawner.store_identity_class = "scalelab.spawner.store_identity.HDFSUserIdentity"
    c.ScaleLabSpawner.spark_master = "yarn"
    c.ScaleLabSpawner.hadoop_conf_dir = str(service.conf_dir)
    c.ScaleLabSpawner.spark_conf = dict(SPARK_CONF)


def wait_ready(
    service: HadoopService,
    stop: threading.Event,
    hub_alive: Callable[[], bool],
    timeout_s: float = READY_TIMEOUT_S,
) -> str:
    """Wait until the cluster is up: its client configuration written (``yarn-site.xml``, the
    JVM's last step, after the NodeManagers registered and the namenode left safe mode) and
    WebHDFS answering.

    Returns
    -------
    str
        ``"ready"``; ``"stopped"`` (``stop`` was set), ``"hub-exited"`` or ``"timeout"``.
    """
    deadline = time.monotonic() + timeout_s
    url = (
        f"http://127.0.0.1:{service.ports.namenode_http}/webhdfs/v1/?op=GETFILESTATUS"
        f"&user.name={pwd.getpwuid(os.geteuid()).pw_name}"
    )
    while time.monotonic() < deadline:
        if stop.is_set():
            return "stopped"
        if not hub_alive():
            return "hub-exited"
        if (service.conf_dir / "yarn-site.xml").is_file():
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    if answer.status == 200:
                        return "ready"
            except (urllib.error.URLError, OSError):
                pass
        stop.wait(0.5)
    return "timeout"


def prepare_course_store(service: HadoopService) -> None:
    """Make the course folder's ``datasets/`` and ``home/`` on HDFS where missing (the hub's
    user's, HDFS's default umask 022: readable by all), as ops of a course cluster do once.

    Raises
    ------
    UpError
        The namenode refused or did not answer (the message has its words).
    """
    from scalelab.store import open_store

    try:
        fs = open_store(service.store_url)
        for name in ("datasets", "home"):
            fs.makedirs(name, exist_ok=True)
    except Exception as exc:  # noqa: BLE001 -- each HDFS client raises its own errors
        raise UpError(f"cannot make the course folders in {service.store_url}: {exc}") from None


def log_tail(service: HadoopService, lines: int = 20) -> str:
    """The cluster log's last ``lines`` lines ("" when it cannot be read)."""
    try:
        text = (service.data_dir / "cluster.log").read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def banner_lines(service: HadoopService) -> list[str]:
    """What ``scalelab up`` prints of the running cluster."""
    p = service.ports
    return [
        f"  Hadoop test cluster: HDFS hdfs://127.0.0.1:{p.namenode_rpc} "
        f"(web http://127.0.0.1:{p.namenode_http}), YARN http://127.0.0.1:{p.web}; Spark runs "
        "on YARN",
        f"    its data is kept in {service.data_dir}, its ports in "
        f"{Path(service.folder) / 'ports.json'}",
    ]
