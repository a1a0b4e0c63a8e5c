"""Spark on YARN from the PySpark kernel: client mode, Spark's own files local to the NodeManagers.

Client mode (the driver in the student's server); Spark's jars, PySpark and the executors'
Python taken from ``local:`` paths on each NodeManager instead of uploaded at every start; the
staging folder in the student's home of an HDFS store. What ops set wins.
Why: docs/design-notes.md, scalelab.kernels.spark_yarn.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from scalelab import envvars

#: ``spark.master`` of Spark on YARN.
YARN_MASTER = "yarn"
#: Where Spark finds the cluster's configuration (either will do; Spark reads both).
CONF_DIR_VARIABLES = ("HADOOP_CONF_DIR", "YARN_CONF_DIR")


def is_yarn(master: str) -> bool:
    """Whether ``spark.master`` is YARN."""
    return master.strip().lower() == YARN_MASTER


def spark_home(environ: Mapping[str, str]) -> Path:
    """The Spark installation the kernel's PySpark runs: ``SPARK_HOME``, else the ``pyspark``
    package's folder (pip's PySpark carries its jars there), found without importing it.

    Raises
    ------
    FileNotFoundError
        Neither is there.
    """
    if environ.get("SPARK_HOME"):
        return Path(environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no SPARK_HOME and no pyspark package: pip install pyspark")
    return Path(spec.origin).parent


def yarn_conf(home: Path, staging_dir: str | None = None) -> dict[str, str]:
    """Spark settings ScaleLab adds for YARN (pure): client mode, Spark's jars taken from
    ``<home>/jars`` on each NodeManager instead of uploaded (``spark.yarn.jars``), and
    ``spark.yarn.stagingDir`` when ``staging_dir`` is given (see :func:`staging_dir`)."""
    conf = {
        "spark.submit.deployMode": "client",
        "spark.yarn.jars": f"local:{home}/jars/*",
    }
    if staging_dir:
        conf["spark.yarn.stagingDir"] = staging_dir
    return conf


def staging_dir(environ: Mapping[str, str]) -> str | None:
    """``<store>/home`` where the course store (``SCALELAB_STORE_URL``) is on HDFS and the
    student's Hadoop user (``HADOOP_USER_NAME``, else ``JUPYTERHUB_USER``) is their hub name, so
    that Spark stages in ``<store>/home/<user>/.sparkStaging``, the student's own folder (pure).
    None otherwise: Spark's default, the user's Hadoop home."""
    store = environ.get(envvars.STORE_URL, "")
    user = environ.get("JUPYTERHUB_USER", "")
    if not store.startswith("hdfs://") or not user:
        return None
    if environ.get("HADOOP_USER_NAME", user) != user:
        return None
    return store.rstrip("/") + "/home"


def pyspark_archives(home: Path) -> str:
    """``PYSPARK_ARCHIVES_PATH`` for PySpark's own archives on each NodeManager (``local:``
    URIs of ``<home>/python/lib/pyspark.zip`` and its ``py4j-*-src.zip``), so that they are
    not uploaded either.

    Raises
    ------
    FileNotFoundError
        The archives are not in ``<home>/python/lib``.
    """
    lib = home / "python" / "lib"
    archives = [lib / "pyspark.zip", *sorted(lib.glob("py4j-*-src.zip"))[-1:]]
    missing = [str(path) for path in archives if not path.is_file()]
    if missing or len(archives) < 2:
        raise FileNotFoundError(
            f"PySpark's archives for YARN are not in {lib} (pyspark.zip and py4j-*-src.zip): "
            "set SPARK_HOME to a full Spark installation, or PYSPARK_ARCHIVES_PATH"
        )
    return ",".join(f"local:{path}" for path in archives)


def yarn_environment(environ: Mapping[str, str], home: Path, python: str) -> dict[str, str]:
    """Environment variables the driver needs for YARN that ``environ`` lacks (what ops set
    wins): ``PYSPARK_ARCHIVES_PATH`` (:func:`pyspark_archives`) and ``PYSPARK_PYTHON``
    (``python``, the executors' interpreter).

    Raises
    ------
    FileNotFoundError
        No PySpark archives to point at (see :func:`pyspark_archives`).
    """
    env: dict[str, str] = {}
    if not environ.get("PYSPARK_ARCHIVES_PATH"):
        env["PYSPARK_ARCHIVES_PATH"] = pyspark_archives(home)
    if not environ.get("PYSPARK_PYTHON"):
        env["PYSPARK_PYTHON"] = python
    return env


def kernel_tag(pid: int | None = None) -> str:
    """This kernel's YARN application tag (``spark.yarn.tags``; YARN keeps tags in lower case):
    ``scalelab-kernel-<host>-<pid>``, by which the kernel finds its own application."""
    host = socket.gethostname().lower()[:60]
    return f"scalelab-kernel-{host}-{os.getpid() if pid is None else pid}"


def with_kernel_tag(tags: str, tag: str) -> str:
    """``spark.yarn.tags`` with ``tag`` added to those ops set (pure)."""
    kept = [t.strip() for t in tags.split(",")]
    return ",".join([*(t for t in kept if t and t != tag), tag])


def missing_conf_dir(environ: Mapping[str, str]) -> str | None:
    """Why Spark cannot find the YARN cluster from ``environ``, with the fix; None when
    ``HADOOP_CONF_DIR`` or ``YARN_CONF_DIR`` names a folder holding ``yarn-site.xml``."""
    given = [(name, environ[name]) for name in CONF_DIR_VARIABLES if environ.get(name)]
    if not given:
        return (
            "spark.master is yarn, but neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set, so "
            "Spark cannot find the ResourceManager: ops set c.ScaleLabSpawner.hadoop_conf_dir "
            "to the cluster's client configuration folder (with yarn-site.xml), then restart "
            "your server"
        )
    if not any((Path(folder) / "yarn-site.xml").is_file() for _name, folder in given):
        where = ", ".join(f"{name}={folder}" for name, folder in given)
        return (
            f"spark.master is yarn, but there is no yarn-site.xml in {where}, so Spark cannot "
            "find the ResourceManager: ops point c.ScaleLabSpawner.hadoop_conf_dir at the "
            "cluster's client configuration folder, then restart your server"
        )
    return None


#: Hadoop's default port of the ResourceManager's client RPC, where applications are submitted.
RM_PORT = 8032
#: Seconds to wait for a TCP connection to a ResourceManager.
RM_PROBE_TIMEOUT_S = 2.0


def resourcemanager_addresses(conf: Mapping[str, str]) -> list[tuple[str, int]]:
    """The ResourceManager(s) a YARN client submits to, from yarn-site.xml's ``conf`` (pure):
    each RM of an HA pair (``yarn.resourcemanager.ha.rm-ids``), else the one; its
    ``yarn.resourcemanager.address[.<id>]``, else ``yarn.resourcemanager.hostname[.<id>]`` with
    Hadoop's port 8032. Empty when yarn-site.xml names none (Hadoop's default, 0.0.0.0)."""
    ids = [i.strip() for i in conf.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i]
    ha = conf.get("yarn.resourcemanager.ha.enabled", "").strip().lower() == "true" and ids
    found = []
    for suffix in [f".{i}" for i in ids] if ha else [""]:
        address = conf.get(f"yarn.resourcemanager.address{suffix}", "").strip()
        host = conf.get(f"yarn.resourcemanager.hostname{suffix}", "").strip()
        if address and not address.startswith("${"):
            name, _, port = address.rpartition(":")
            found.append((name or host, int(port) if port.isdigit() else RM_PORT))
        elif host:
            found.append((host, RM_PORT))
    return found


#: Hadoop's default port of the ResourceManager's web UI and REST API.
RM_WEB_PORT = 8088


def resourcemanager_web_address(conf: Mapping[str, str]) -> str | None:
    """The ResourceManager's web ``host:port`` from yarn-site.xml (pure):
    ``yarn.resourcemanager.webapp.address``, else ``yarn.resourcemanager.hostname`` with
    Hadoop's default port 8088; None when neither is set."""
    address = conf.get("yarn.resourcemanager.webapp.address", "").strip()
    if address and not address.startswith("${"):
        return address
    host = conf.get("yarn.resourcemanager.hostname", "").strip()
    return f"{host}:{RM_WEB_PORT}" if host else None


def unreachable_resourcemanager(
    environ: Mapping[str, str], timeout_s: float = RM_PROBE_TIMEOUT_S
) -> str | None:
    """Why a Spark application cannot be submitted to YARN because no ResourceManager answers
    (one line: the addresses and what to do), or None when one accepts a TCP connection or
    yarn-site.xml names none. Spark itself would retry for minutes without a word in the
    notebook. Reads ``$HADOOP_CONF_DIR``/``$YARN_CONF_DIR``'s yarn-site.xml."""
    from scalelab.store.access.check import tcp_reachable
    from scalelab.store.access.hdfs import read_hadoop_conf
    from scalelab.store.errors import StoreConfigError

    folder = next((environ[n] for n in CONF_DIR_VARIABLES if environ.get(n)), None)
    try:
        addresses = resourcemanager_addresses(read_hadoop_conf(folder, ("yarn-site.xml",)))
    except StoreConfigError:  # a file Spark reads itself: its own error then
        return None
    if not addresses or any(tcp_reachable(h, p, timeout_s) for h, p in addresses):
        return None
    where = ", ".join(f"{host}:{port}" for host, port in addresses)
    return (
        f"Spark on YARN cannot start: the ResourceManager at {where} does not answer. The "
        "cluster may be down or restarting: try again in a few minutes, and tell the course's "
        "operators (scalelab doctor checks YARN). Until then, local Spark works: "
        "spark.master local[*]."
    )
