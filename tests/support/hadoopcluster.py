"""A real HDFS (and YARN) for tests: ScaleLab's test cluster (``hadoop/testcluster``) on loopback.

One JVM runs Hadoop's own ``MiniDFSCluster`` (a namenode, or an HA pair behind a nameservice,
and a datanode; WebHDFS on, permissions on, simple authentication) and, when asked for, its
``MiniYARNCluster`` (a ResourceManager and NodeManagers running real containers, each
NodeManager offering 4 GiB and 2 vcores, the physical-memory check on), every port free and
bound to 127.0.0.1, its data and client configuration (``HADOOP_CONF_DIR``: ``core-site.xml``,
``hdfs-site.xml``, ``yarn-site.xml``) in a folder of the test's.
``install.sh`` builds the Maven project once (``target/scalelab-testcluster.jar`` and its jars in
``target/lib/``); tests never download. The user running the tests owns the namenode, so it is
the HDFS superuser; any other name a client sends (``HADOOP_USER_NAME`` for hdfs-native,
``user`` for WebHDFS) is that user, as on a course cluster without Kerberos.

With ``kerberos=True`` the JVM also runs a KDC (Hadoop's ``MiniKdc``, ``SecureSetup.java``) and
HDFS is secure (``hadoop.security.authentication = kerberos``, SASL on the data transfer,
HTTPS only, SPNEGO on WebHDFS; clients trust ``conf/tls/ca.pem``): principals
``hdfs/localhost`` (the superuser), ``HTTP/localhost``, the hub's ``scalelab`` (in the
superuser group) and one per student, each with a keytab in ``conf/keytabs/``, and
``conf/krb5.conf`` for ``KRB5_CONFIG``; :meth:`HadoopTestCluster.kinit` gets a ticket into a
cache of the test's.

The JVM prints one line of JSON on stdout when the cluster is up, answers commands written to its
stdin (``failover``: :meth:`HadoopTestCluster.failover`) with a line each, and stops when its
stdin closes: :meth:`HadoopTestCluster.stop` closes it, waits, then kills.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec

# The Maven project's jars, and why the cluster cannot run: ScaleLab's own (``scalelab up
# --hadoop`` runs the same cluster as a hub service).
from scalelab.commands.up_hadoop import BUILD_FIX as FIX
from scalelab.commands.up_hadoop import JAR, LIB, MAIN_CLASS
from scalelab.commands.up_hadoop import missing_reason as build_missing

#: The JVM's heap limit (``-Xmx``); the whole process stays near 300 MiB resident (HDFS
#: alone) or 450 MiB (with YARN's ResourceManager and two NodeManagers; their containers are
#: processes of their own).
HEAP = "512m"
#: Seconds to wait for the ready line (about 10 s on 2 idle cores, 20 s with YARN).
START_TIMEOUT_S = 180.0


def missing_reason(kerberos: bool = False) -> str | None:
    """Why the test cluster cannot start here, with the fix; None when it can.

    No ``java`` on PATH, or the Maven project not built (no jar, or no jars in ``target/lib``);
    with ``kerberos``, also no ``hadoop-minikdc`` jar or no ``kinit`` (Debian's krb5-user).
    """
    reason = build_missing()
    if reason:
        return reason
    if kerberos and not any(LIB.glob("hadoop-minikdc-*.jar")):
        return f"the HDFS test cluster was built without hadoop-minikdc: {FIX}"
    if kerberos and shutil.which("kinit") is None:
        return "no kinit on PATH for the Kerberos tests: run ./install.sh (it installs krb5-user)"
    return None


class ClusterStartError(AssertionError):
    """The test cluster was built but did not start: the message has the JVM's last lines."""


#: What ops would set for the course's YARN queue (``c.ScaleLabSpawner.spark_conf``), sized for
#: the test cluster: two executors of one core and a 512 MiB heap (containers of 512 + 384 MiB
#: overhead = 896 MiB), a small application master; a task is not retried, so an executor that
#: YARN kills fails its job at once (on a course cluster Spark would try 3 more executors).
YARN_SPARK_CONF = {
    "spark.executor.instances": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.yarn.am.memory": "384m",
    "spark.task.maxFailures": "1",
}


class HadoopTestCluster:
    """The test cluster's JVM, in a child process.

    Parameters
    ----------
    folder
        Where the cluster's data (``base/``), client configuration (``conf/``) and log
        (``cluster.log``: the JVM's stderr) go.
    heap
        The JVM's ``-Xmx``.
    nameservice
        None: one namenode. A name: an HA pair (``nn1`` active, ``nn2`` standby) behind the
        nameservice of that name, which ``fs.defaultFS`` names.
    kerberos, students
        A secure cluster with its KDC, and a principal and keytab for each student named.
    nodemanagers
        0: HDFS only. 1 to 8: YARN too, with that many NodeManagers (``--yarn N``).

    Attributes (after :meth:`start`)
    --------------------------------
    rpc_port, http_port
        The (first) namenode's RPC port and its HTTP port (WebHDFS).
    namenodes
        ``{"id": "nn1", "rpc_port": ..., "http_port": ...}`` for each namenode.
    conf_dir
        The client configuration, for ``HADOOP_CONF_DIR``.
    superuser
        The HDFS superuser: the user who runs the JVM (and the tests); ``hdfs`` with Kerberos.
    kerberos_info
        With Kerberos, the ready line's ``kerberos`` object: ``realm``, ``kdc_port``,
        ``krb5_conf``, ``ca_pem`` (the HTTPS certificate to trust), ``hub``, ``students`` and
        ``principals`` (short name -> ``principal``, ``keytab``); else None.
    start_s
        Seconds from the JVM's start to the ready line.
    yarn
        None without YARN; else the ready line's ``"yarn"``: ``resourcemanager`` and
        ``scheduler`` (``"127.0.0.1:<port>"``), ``webapp`` and ``web_port`` (the
        ResourceManager's web UI and REST API), ``nodemanagers`` (their number),
        ``nodemanager_memory_mb``, ``nodemanager_vcores`` and ``nodemanager_log_dirs`` (each
        NodeManager's container log folder: ``<dir>/<application>/<container>/stderr``).
    """

    def __init__(
        self,
        folder: Path,
        heap: str = HEAP,
        nameservice: str | None = None,
        kerberos: bool = False,
        students: tuple[str, ...] = (),
        nodemanagers: int = 0,
    ):
        self.folder = folder
        self.heap = heap
        self.nameservice = nameservice
        self.kerberos = kerberos
        self.students = students
        self.kerberos_info: dict[str, Any] | None = None
        self.nodemanagers = nodemanagers
        self.yarn: dict[str, Any] | None = None
        self.namenodes: list[dict[str, Any]] = []
        self.log = folder / "cluster.log"
        self.conf_dir = folder / "conf"
        self.proc: subprocess.Popen | None = None
        self.rpc_port = 0
        self.http_port = 0
        self.superuser = ""
        self.start_s = 0.0
        self._reader: threading.Thread | None = None
        self._lines: queue.Queue[bytes] = queue.Queue()

    def argv(self) -> list[str]:
        """The JVM's command line: the serial collector and the C1 compiler only, which start
        the cluster in 7 to 8 s instead of 10 to 13 s on 2 busy cores."""
        return [
            "java", f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", f"{JAR}:{LIB}/*", MAIN_CLASS,
            "--base-dir", str(self.folder / "base"), "--conf-dir", str(self.conf_dir),
            *(["--ha", self.nameservice] if self.nameservice else []),
            *(["--kerberos"] if self.kerberos else []),
            *(["--students", ",".join(self.students)] if self.kerberos and self.students else []),
            *(["--yarn", str(self.nodemanagers)] if self.nodemanagers else []),
        ]  # fmt: skip

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the JVM and wait for its ready line.

        Raises
        ------
        ClusterStartError
            The JVM exited, printed something else, or was not ready within ``timeout_s``
            (it is killed then); the message has its last log lines.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
            )
        lines = self._lines
        self._reader = threading.Thread(
            target=_read_lines, args=(self.proc.stdout, lines), daemon=True
        )
        self._reader.start()
        try:
            line = lines.get(timeout=timeout_s)
        except queue.Empty:
            self.kill()
            raise ClusterStartError(
                f"the HDFS test cluster was not ready within {timeout_s:.0f} s; its log "
                f"({self.log}):\n{self.log_tail()}"
            ) from None
        try:
            ready = json.loads(line)
        except ValueError:
            ready = {}
        if not isinstance(ready, dict) or not ready.get("ready"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)  # a JVM that failed is exiting
            status = self.proc.poll()
            self.kill()
            out = line + b"".join(_drain(lines))
            how = "" if status is None else f" (exit status {status})"
            raise ClusterStartError(
                f"the HDFS test cluster did not start{how}; its stdout:\n"
                f"{out.decode(errors='replace')[-2000:]}\nits log ({self.log}):\n"
                f"{self.log_tail()}"
            )
        self.start_s = time.monotonic() - began
        self.rpc_port = int(ready["namenode_rpc_port"])
        self.http_port = int(ready["webhdfs_port"])
        self.superuser = str(ready["superuser"])
        self.namenodes = list(ready["namenodes"])
        self.kerberos_info = ready.get("kerberos")
        self.yarn = ready.get("yarn")

    def failover(self, timeout_s: float = 60) -> str:
        """Make the active namenode of the HA pair standby and the other active; returns the
        id of the active one now (``"nn2"``).

        Raises
        ------
        AssertionError
            No answer within ``timeout_s``, or the JVM's ``{"error": ...}`` (no HA pair, a
            transition that failed: the stack trace is in its log).
        """
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"failover\n")
        self.proc.stdin.flush()
        try:
            answer = json.loads(self._lines.get(timeout=timeout_s) or b"{}")
        except queue.Empty:
            raise AssertionError(f"no answer to failover in {timeout_s:.0f} s") from None
        if "active" not in answer:
            raise AssertionError(f"failover: {answer}; the log:\n{self.log_tail()}")
        return str(answer["active"])

    def stop(self, timeout_s: float = 30) -> float:
        """Close the JVM's stdin (it shuts the cluster down and exits); kill it after
        ``timeout_s``. Returns the seconds the stop took."""
        began = time.monotonic()
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_pipes()
        return time.monotonic() - began

    def kill(self) -> None:
        """SIGKILL the JVM and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._close_pipes()

    def _close_pipes(self) -> None:
        if self.proc is None or self.proc.poll() is None:
            return
        if self._reader is not None:
            self._reader.join(timeout=5)  # it ends at the closed stdout's end
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` of the JVM's stderr."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # -- addresses and clients -----------------------------------------------------------------

    def url(self, path: str = "/") -> str:
        """``hdfs://127.0.0.1:<rpc port><path>``."""
        return f"hdfs://127.0.0.1:{self.rpc_port}/{path.lstrip('/')}"

    def webhdfs_url(self, path: str = "/") -> str:
        """``webhdfs://127.0.0.1:<http port><path>``."""
        return f"webhdfs://127.0.0.1:{self.http_port}/{path.lstrip('/')}"

    def webhdfs(self, user: str | None = None, proxy_to: str | None = None) -> Any:
        """fsspec's WebHDFS client as ``user`` (default: the superuser), acting for
        ``proxy_to`` when given (WebHDFS's ``doas``); a new instance."""
        return fsspec.filesystem(
            "webhdfs",
            host="127.0.0.1",
            port=self.http_port,
            user=user or self.superuser,
            proxy_to=proxy_to,
            skip_instance_cache=True,
        )

    def resourcemanager(self, path: str) -> dict[str, Any]:
        """GET ``/ws/v1/cluster/<path>`` of the ResourceManager's REST API (YARN only)."""
        import requests

        assert self.yarn is not None, "no YARN in this cluster (nodemanagers=0)"
        url = f"http://{self.yarn['webapp']}/ws/v1/cluster/{path}"
        answer = requests.get(url, timeout=30, headers={"Accept": "application/json"})
        answer.raise_for_status()
        return answer.json()

    # -- Kerberos ------------------------------------------------------------------------------

    def principal(self, name: str) -> str:
        """The principal of ``name`` (a student, ``scalelab``, ``hdfs``): ``alice@SCALELAB.TEST``"""
        assert self.kerberos_info is not None, "not a Kerberos cluster (kerberos=True)"
        return str(self.kerberos_info["principals"][name]["principal"])

    def keytab(self, name: str) -> str:
        """The keytab file of ``name``'s principal."""
        assert self.kerberos_info is not None, "not a Kerberos cluster (kerberos=True)"
        return str(self.kerberos_info["principals"][name]["keytab"])

    def kinit(self, name: str, cache: Path, lifetime: str | None = None) -> dict[str, str]:
        """Get a ticket for ``name``'s principal from its keytab into the ticket cache ``cache``
        (``kinit -kt``; ``lifetime`` as kinit's ``-l``, e.g. ``"2s"``). Returns the client's
        environment: ``KRB5_CONFIG``, ``KRB5CCNAME`` and ``HADOOP_CONF_DIR``.

        Raises
        ------
        AssertionError
            kinit failed (its output in the message).
        """
        env = self.kerberos_environment(cache)
        argv = ["kinit", *(["-l", lifetime] if lifetime else []), "-kt", self.keytab(name)]
        done = subprocess.run(
            [*argv, self.principal(name)],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{' '.join(argv)} failed: {done.stderr or done.stdout}"
        return env

    def kerberos_environment(self, cache: Path) -> dict[str, str]:
        """``KRB5_CONFIG`` (the cluster's krb5.conf), ``KRB5CCNAME`` (``FILE:<cache>``) and
        ``HADOOP_CONF_DIR``, for a client with the ticket cache ``cache``."""
        assert self.kerberos_info is not None, "not a Kerberos cluster (kerberos=True)"
        return {
            "KRB5_CONFIG": str(self.kerberos_info["krb5_conf"]),
            "KRB5CCNAME": f"FILE:{cache}",
            "HADOOP_CONF_DIR": str(self.conf_dir),
        }

    def environment(self, user: str | None = None) -> dict[str, str]:
        """Variables for a client of this cluster: ``HADOOP_CONF_DIR`` (and ``YARN_CONF_DIR``
        with YARN), and ``HADOOP_USER_NAME`` when ``user`` is given (hdfs-native and Hadoop's
        Java client)."""
        env = {"HADOOP_CONF_DIR": str(self.conf_dir)}
        if self.yarn is not None:
            env["YARN_CONF_DIR"] = str(self.conf_dir)
        if user is not None:
            env["HADOOP_USER_NAME"] = user
        return env


def running_cluster(
    folder: Path,
    nameservice: str | None = None,
    kerberos: bool = False,
    students: tuple[str, ...] = (),
    nodemanagers: int = 0,
) -> Iterator[HadoopTestCluster]:
    """A pytest fixture's body: a started :class:`HadoopTestCluster` in ``folder`` (with YARN
    and ``nodemanagers`` NodeManagers when not 0), stopped after the ``yield``. Skips, naming
    the fix (``./install.sh``), where it is not built or there is no Java (or, with
    ``kerberos``, no kinit); fails every test that uses it, with the JVM's last lines, where it
    is built but does not start."""
    import pytest

    reason = missing_reason(kerberos)
    if reason is not None:
        pytest.skip(reason)
    cluster = HadoopTestCluster(
        folder,
        nameservice=nameservice,
        kerberos=kerberos,
        students=students,
        nodemanagers=nodemanagers,
    )
    try:
        try:
            cluster.start()
        except ClusterStartError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield cluster
    finally:
        cluster.stop()


def _drain(lines: queue.Queue[bytes]) -> list[bytes]:
    """What ``lines`` holds now."""
    out = []
    with contextlib.suppress(queue.Empty):
        while True:
            out.append(lines.get_nowait())
    return out


def _read_lines(stream: Any, out: queue.Queue[bytes]) -> None:
    """Put each line of ``stream`` into ``out``, then ``b""`` at its end."""
    for line in iter(stream.readline, b""):
        out.put(line)
    out.put(b"")


def yarn_server_environment(
    cluster: HadoopTestCluster, driver_memory: str = "1g"
) -> dict[str, str]:
    """The Spark and Hadoop variables ScaleLab's spawner gives a server for
    ``spark_master = "yarn"`` on ``cluster`` (:data:`YARN_SPARK_CONF`); the store's and the
    kernels' are left to the caller."""
    from scalelab.spawner.environment import server_environment

    env = server_environment(
        store_url="file:///unused",
        store_options={},
        spark_master="yarn",
        spark_driver_memory=driver_memory,
        spark_conf=YARN_SPARK_CONF,
        hadoop_conf_dir=str(cluster.conf_dir),
    )
    return {k: v for k, v in env.items() if k.startswith(("SCALELAB_SPARK", "HADOOP", "YARN"))}
