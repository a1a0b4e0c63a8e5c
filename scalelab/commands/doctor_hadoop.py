"""``scalelab doctor``'s checks of a Hadoop cluster: the namenode, the Kerberos ticket, YARN.

Each runs only where the hub's configuration uses the cluster, reads the client configuration
the servers get (``HADOOP_CONF_DIR``, else ``YARN_CONF_DIR``) and only looks: it writes
nothing, answers within ``timeout_s`` per address and never raises.
Why: docs/design-notes.md, scalelab.commands.doctor_hadoop.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from scalelab.commands.doctor_report import FAIL, OK, WARN, Check
from scalelab.kernels.spark_yarn import resourcemanager_web_address
from scalelab.store import protocols
from scalelab.store.access.hdfs import (
    HdfsTarget,
    kerberos_required,
    read_hadoop_conf,
    resolve_hdfs,
    ticket_cache,
)
from scalelab.store.errors import StoreConfigError
from scalelab.store.protocols.hdfs import WebHDFSProtocol

#: Seconds each address may take to answer.
PROBE_TIMEOUT_S = 5.0
#: Hadoop's client configuration files read here, later ones winning.
CLUSTER_FILES = ("core-site.xml", "hdfs-site.xml", "yarn-site.xml")
#: The ResourceManager's web port when yarn-site.xml names only its host (Hadoop's default).


def conf_dir_of(env: Mapping[str, str]) -> str | None:
    """The servers' Hadoop client configuration folder: ``HADOOP_CONF_DIR``, else
    ``YARN_CONF_DIR`` (Spark's own order), else None."""
    return env.get("HADOOP_CONF_DIR") or env.get("YARN_CONF_DIR") or None


def hadoop_checks(
    store_url: str,
    store_options: Mapping[str, Any],
    spark_master: str,
    env: Mapping[str, str],
    timeout_s: float = PROBE_TIMEOUT_S,
) -> list[Check]:
    """The cluster checks the configuration calls for (none for a hub off the cluster).

    Parameters
    ----------
    store_url, store_options
        ``c.ScaleLabSpawner.store_url`` and ``.store_options``.
    spark_master
        ``c.ScaleLabSpawner.spark_master``; ``"yarn"`` adds the ResourceManager check.
    env
        The servers' environment (``HADOOP_CONF_DIR``, ``KRB5CCNAME``, ``KRB5_CONFIG``).
    """
    conf_dir = conf_dir_of(env)
    try:
        conf = read_hadoop_conf(conf_dir, CLUSTER_FILES)
    except StoreConfigError as exc:
        return [Check("Hadoop configuration", FAIL, str(exc), "Fix the file it names.")]
    on_hadoop = protocols.for_url(store_url).hadoop
    yarn = spark_master.strip().lower() == "yarn"
    checks = []
    if on_hadoop:
        checks.append(check_namenode(store_url, store_options, conf, env, timeout_s))
    if kerberos_required(conf) and (on_hadoop or yarn):
        checks.append(check_ticket(env))
    if yarn:
        checks.append(check_resourcemanager(conf, conf_dir, timeout_s))
    return checks


# -- the namenode ----------------------------------------------------------------------------


def _port_answers(host: str, port: int, timeout_s: float) -> str | None:
    """None when a TCP connection to ``host:port`` opens within ``timeout_s``, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def namenode_http_addresses(target: HdfsTarget, conf: Mapping[str, str]) -> list[str]:
    """The WebHDFS ``host:port`` of each namenode of ``target`` from ``conf`` (pure): for an HA
    nameservice ``dfs.namenode.http-address.<ns>.<id>`` in the order of
    ``dfs.ha.namenodes.<ns>``, else ``dfs.namenode.http-address``; empty when unset."""
    if target.nameservice is None:
        address = conf.get("dfs.namenode.http-address", "").strip()
        return [address] if address else []
    ids = conf.get(f"dfs.ha.namenodes.{target.nameservice}", "").split(",")
    keys = [f"dfs.namenode.http-address.{target.nameservice}.{i.strip()}" for i in ids]
    return [conf[k].strip() for k in keys if conf.get(k, "").strip()]


def _webhdfs_status(address: str, path: str, user: str, timeout_s: float) -> str | None:
    """None when WebHDFS at ``address`` answers ``GETFILESTATUS`` of ``path`` (200, 404 for a
    missing path, 401 where it asks for SPNEGO, 403 from a standby namenode), else why not."""
    import requests

    url = f"http://{address}/webhdfs/v1{path}"
    try:
        response = requests.get(
            url, params={"op": "GETFILESTATUS", "user.name": user}, timeout=timeout_s
        )
    except requests.RequestException as exc:
        reason = exc.__class__.__name__
        if "Connection refused" in str(exc):
            reason = "connection refused"
        return reason
    if response.status_code in (200, 401, 403, 404):
        return None
    return f"HTTP {response.status_code}"


def check_namenode(
    store_url: str,
    store_options: Mapping[str, Any],
    conf: Mapping[str, str],
    env: Mapping[str, str],
    timeout_s: float = PROBE_TIMEOUT_S,
) -> Check:
    """The store's namenode(s): each RPC port opens and WebHDFS answers.

    ``hdfs://`` URLs resolve through ``conf`` as the servers' clients resolve them
    (:func:`~scalelab.store.access.hdfs.resolve_hdfs`: a ``host:port``, an HA nameservice, or
    ``fs.defaultFS``); WebHDFS is where ``conf`` puts each namenode's HTTP address, not checked
    when it puts none. A ``webhdfs://`` URL names the HTTP address itself, and the RPC port is
    checked when ``conf`` has one (``fs.defaultFS``). One namenode of an HA pair down is a
    warning (the other serves), every namenode down a failure.
    """
    name = "HDFS namenode"
    user = str(store_options.get("user") or env.get("HADOOP_USER_NAME") or getpass.getuser())
    if protocols.scheme_of(store_url) in WebHDFSProtocol.schemes:
        parts = urlsplit(store_url)
        rpc_url = conf.get("fs.defaultFS", "")
        rpc = resolve_hdfs(rpc_url, conf).namenodes if rpc_url.startswith("hdfs://") else ()
        http = [parts.netloc]
        path = parts.path or "/"
    else:
        try:
            target = resolve_hdfs(store_url, conf)
        except StoreConfigError as exc:
            return Check(name, FAIL, str(exc), "Fix the store URL or HADOOP_CONF_DIR as it says.")
        rpc, http, path = target.namenodes, namenode_http_addresses(target, conf), target.path
    seen: list[str] = []
    down: list[str] = []
    probes = [(f"RPC {h}:{p}", lambda h=h, p=p: _port_answers(h, p, timeout_s)) for h, p in rpc]
    probes += [
        (f"WebHDFS {a}", lambda a=a: _webhdfs_status(a, path, user, timeout_s)) for a in http
    ]
    for where, probe in probes:
        problem = probe()
        if problem:
            down.append(f"{where} ({problem})")
        else:
            seen.append(where)
    unchecked = "" if http else "; WebHDFS not checked (no dfs.namenode.http-address)"
    fix = (
        "Start the namenode (hdfs --daemon start namenode) or fix its address: the store URL "
        "(c.ScaleLabSpawner.store_url, --store) or HADOOP_CONF_DIR's fs.defaultFS, "
        "dfs.namenode.rpc-address and dfs.namenode.http-address; from the hub's machine, "
        "hdfs dfs -ls / must answer."
    )
    if not down:
        return Check(name, OK, f"{', '.join(seen)} answer{unchecked}")
    if len(rpc) > 1 and any(s.startswith("RPC") for s in seen):  # an HA pair still serves
        return Check(name, WARN, f"{', '.join(down)} down; {', '.join(seen)} answer", fix)
    also = f"; {', '.join(seen)} answer" if seen else ""
    return Check(name, FAIL, f"{', '.join(down)} do not answer{also}", fix)


# -- Kerberos --------------------------------------------------------------------------------


def check_ticket(env: Mapping[str, str]) -> Check:
    """A valid Kerberos ticket for the servers (``klist -s`` in their environment: the cache of
    ``KRB5CCNAME``, or the user's default one)."""
    name = "Kerberos ticket"
    klist = shutil.which("klist", path=env.get("PATH"))
    if klist is None:
        return Check(
            name, FAIL, "the cluster uses Kerberos and there is no klist here",
            "Install MIT Kerberos' tools (Debian: apt-get install krb5-user; ./install.sh does).",
        )  # fmt: skip
    cache = ticket_cache(env, os.getuid()) or env.get("KRB5CCNAME", "")
    fix = (
        "Get a ticket as the user the hub runs as: kinit -kt <keytab> <principal> (with "
        "KRB5CCNAME set as the servers get it), and renew it before it expires (k5start or a "
        "cron job running kinit -kt)."
    )
    try:
        valid = subprocess.run(
            [klist, "-s"], env=dict(env), capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
        listing = subprocess.run(
            [klist], env=dict(env), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, FAIL, f"klist did not run: {exc}", fix)
    principal = next(
        (line.split(":", 1)[1].strip() for line in listing.stdout.splitlines()
         if line.startswith("Default principal:")),
        None,
    )  # fmt: skip
    if valid.returncode != 0:
        what = (
            f"the ticket of {principal} in {cache} has expired"
            if principal
            else f"no Kerberos ticket in {cache}"
        )
        return Check(name, FAIL, what, fix)
    return Check(name, OK, f"{principal} holds a valid ticket ({cache})")


# -- YARN ------------------------------------------------------------------------------------


def check_resourcemanager(
    conf: Mapping[str, str], conf_dir: str | None, timeout_s: float = PROBE_TIMEOUT_S
) -> Check:
    """YARN for ``spark.master = yarn``: the ResourceManager's REST API answers, it is
    ``STARTED`` (and active, where it is an HA pair's) and has at least one NodeManager."""
    import requests

    name = "YARN ResourceManager"
    address = resourcemanager_web_address(conf)
    if address is None:
        where = f"{conf_dir}/yarn-site.xml" if conf_dir else "no HADOOP_CONF_DIR or YARN_CONF_DIR"
        return Check(
            name, FAIL, f"spark_master is yarn, but the servers' Hadoop configuration names no "
            f"ResourceManager ({where})",
            "Set c.ScaleLabSpawner.hadoop_conf_dir to the folder whose yarn-site.xml sets "
            "yarn.resourcemanager.hostname (or .address and .webapp.address).",
        )  # fmt: skip
    fix = (
        f"Start the ResourceManager and NodeManagers (yarn --daemon start resourcemanager) or "
        f"fix yarn.resourcemanager.* in {conf_dir}/yarn-site.xml; from the hub's machine, "
        f"curl http://{address}/ws/v1/cluster/info must answer."
    )
    try:
        info = requests.get(f"http://{address}/ws/v1/cluster/info", timeout=timeout_s)
        info.raise_for_status()
        cluster = info.json()["clusterInfo"]
        metrics = requests.get(f"http://{address}/ws/v1/cluster/metrics", timeout=timeout_s)
        metrics.raise_for_status()
        counts = metrics.json()["clusterMetrics"]
    except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
        reason = "connection refused" if "Connection refused" in str(exc) else str(exc)[:200]
        return Check(name, FAIL, f"{address} does not answer: {reason}", fix)
    state, ha = cluster.get("state"), cluster.get("haState", "ACTIVE")
    nodes = int(counts.get("activeNodes", 0))
    if state != "STARTED" or ha not in ("ACTIVE", None):
        return Check(name, FAIL, f"{address} is {state} ({ha})", fix)
    if nodes == 0:
        return Check(name, FAIL, f"{address} is started but has no NodeManager", fix)
    memory, cores = counts.get("totalMB", 0), counts.get("totalVirtualCores", 0)
    return Check(
        name, OK, f"{address}: {nodes} NodeManager(s), {memory} MB and {cores} vcores in all"
    )
