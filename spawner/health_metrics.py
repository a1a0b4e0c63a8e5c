"""Prometheus gauges of what the students' servers depend on, on the hub's ``/hub/metrics``.

- ``scalelab_store_reachable{protocol}``: 1 when the course store answers (a server of its
  protocol accepts a TCP connection: HDFS's namenodes, S3's endpoint; a local store's folder
  exists), else 0;
- ``scalelab_yarn_reachable``: the same for YARN's ResourceManager (from ``yarn-site.xml`` of
  ``hadoop_conf_dir``), only where Spark runs on YARN;
- ``scalelab_server_memory_bytes{user,server}``: resident memory of each running server's
  process tree (server and kernels, PSS where Linux gives it, else RSS), for servers on the
  hub's machine; ``scalelab_server_memory_limit_bytes{user,server}`` where ``mem_limit`` is set;
- ``scalelab_server_oom_kills{user,server}``: processes the kernel's OOM killer ended in each
  running server's cgroup since it started (local servers with a cgroup of their own: a kernel
  killed for memory; its student reads a notice, :mod:`scalelab.hub_ext.server.oom_watch`).

Spawn failures by reason need nothing here: JupyterHub counts them itself,
``jupyterhub_server_spawn_duration_seconds_count{status="failure"|"error",reason=...}`` (the
``reason`` of ScaleLab's ``SpawnException``\\ s). The probes run in a thread every
``interval_s`` (30 s; a TCP try waits at most 2 s), never in a scrape.
Why: docs/design-notes.md, scalelab.spawner.health_metrics.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scalelab.common.memory_cgroup import read_memory_events
from scalelab.spawner.cgroups import CgroupError, ServerCgroup

#: Seconds between two probes of the store and YARN.
PROBE_INTERVAL_S = 30.0
#: Seconds one TCP try may take.
PROBE_TIMEOUT_S = 2.0


def store_reachable(url: str, options: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """Whether the course store at ``url`` answers: one of its protocol's servers accepts a TCP
    connection, or a local store's folder exists; True where the protocol names no server."""
    from scalelab.store import protocols
    from scalelab.store.access.check import tcp_reachable

    folder = protocols.local_folder(url)
    if folder is not None:
        return folder.is_dir()
    try:
        addresses = protocols.for_url(url).probe_addresses(url, options, environ)
    except Exception:  # noqa: BLE001 -- a configuration it cannot read: the store cannot be used
        return False
    return not addresses or any(tcp_reachable(h, p, PROBE_TIMEOUT_S) for h, p in addresses)


def yarn_reachable(environ: Mapping[str, str]) -> bool:
    """Whether a ResourceManager of ``yarn-site.xml`` accepts a TCP connection (True where the
    file names none)."""
    from scalelab.kernels.spark_yarn import unreachable_resourcemanager

    return unreachable_resourcemanager(environ, PROBE_TIMEOUT_S) is None


def tree_memory_bytes(pid: int) -> int:
    """Memory of process ``pid`` and its descendants: PSS (shared pages split) where readable,
    else RSS; 0 when the process is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except psutil.AccessDenied:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        except psutil.Error:
            continue
    return total


class HealthCollector(Collector):
    """The gauges of the module: reachability from the prober thread's last look, memory read
    at each scrape from ``servers()`` (user, server name, pid, memory limit in bytes or 0)."""

    def __init__(
        self,
        probes: Mapping[str, Callable[[], bool]],
        servers: Callable[[], Iterable[tuple[str, str, int, int]]],
        protocol: str,
        interval_s: float = PROBE_INTERVAL_S,
        memory_cgroups: Callable[[], Iterable[tuple[str, str, Path]]] = tuple,
    ):
        self._probes = dict(probes)
        self._servers = servers
        self._memory_cgroups = memory_cgroups
        self._protocol = protocol
        self._interval_s = interval_s
        self.readings: dict[str, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._probe_loop, name="scalelab-probes", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def probe_once(self) -> None:
        for name, probe in self._probes.items():
            try:
                self.readings[name] = bool(probe())
            except Exception:  # noqa: BLE001 -- a probe that fails is a failed look
                self.readings[name] = False

    def _probe_loop(self) -> None:
        while not self._stop.is_set():
            self.probe_once()
            self._stop.wait(self._interval_s)

    def describe(self) -> list[GaugeMetricFamily]:
        """The families, without a look (what the registry asks at registration)."""
        names = ["scalelab_server_memory_bytes", "scalelab_server_memory_limit_bytes"]
        names.append("scalelab_server_oom_kills")
        names += [f"scalelab_{n}_reachable" for n in ("store", "yarn") if n in self._probes]
        return [GaugeMetricFamily(name, "") for name in names]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if "store" in self.readings:
            store = GaugeMetricFamily(
                "scalelab_store_reachable",
                "1 when the course store answers (a server accepts a TCP connection, or a local "
                "store's folder exists), else 0",
                labels=["protocol"],
            )
            store.add_metric([self._protocol], float(self.readings["store"]))
            yield store
        if "yarn" in self.readings:
            yield GaugeMetricFamily(
                "scalelab_yarn_reachable",
                "1 when a YARN ResourceManager accepts a TCP connection, else 0",
                value=float(self.readings["yarn"]),
            )
        used = GaugeMetricFamily(
            "scalelab_server_memory_bytes",
            "Memory of each running server's process tree on the hub's machine (PSS, else RSS)",
            labels=["user", "server"],
        )
        limit = GaugeMetricFamily(
            "scalelab_server_memory_limit_bytes",
            "The memory limit of each running server that has one (c.Spawner.mem_limit)",
            labels=["user", "server"],
        )
        for user, server, pid, mem_limit in self._servers():
            used.add_metric([user, server], float(tree_memory_bytes(pid)))
            if mem_limit:
                limit.add_metric([user, server], float(mem_limit))
        yield used
        yield limit
        kills = GaugeMetricFamily(
            "scalelab_server_oom_kills",
            "Processes the kernel's OOM killer ended in each running server's cgroup since it "
            "started (its memory limit reached)",
            labels=["user", "server"],
        )
        for user, server, folder in self._memory_cgroups():
            kills.add_metric([user, server], float(read_memory_events(folder).oom_kills))
        yield kills


def local_servers(app: Any) -> Iterator[tuple[str, str, int, int]]:
    """(user, server name, pid, mem_limit) of each running server of ``app`` (the hub) that has a
    process on this machine; none before the hub has loaded its users."""
    if not getattr(app, "tornado_settings", None):
        return
    for user in list(app.users.values()):
        for name, spawner in list(user.spawners.items()):
            pid = getattr(spawner, "pid", 0) or 0
            if pid and spawner.active and os.path.exists(f"/proc/{pid}"):
                yield user.name, name, int(pid), int(spawner.mem_limit or 0)


def local_memory_cgroups(app: Any) -> Iterator[tuple[str, str, Path]]:
    """(user, server name, memory cgroup folder) of each running server of ``app`` (the hub)
    that has a cgroup of its own (:mod:`scalelab.spawner.cgroups`)."""
    if not getattr(app, "tornado_settings", None):
        return
    for user in list(app.users.values()):
        for name, spawner in list(user.spawners.items()):
            cgroup = getattr(spawner, "cgroup_name", "")
            if not (cgroup and spawner.active):
                continue
            try:
                folder = ServerCgroup(spawner.cgroup_parent, cgroup).memory_path
            except CgroupError:
                continue
            yield user.name, name, folder


_registered: list[HealthCollector] = []


def register_health(app: Any, settings: Mapping[str, Any]) -> HealthCollector | None:
    """Register the gauges once per process for the hub ``app`` and its spawner's ``settings``
    (``store_url``, ``store_options``, ``spark_master``, ``hadoop_conf_dir``), and start the
    prober; returns the collector (None when already registered)."""
    if _registered:
        return None
    from scalelab.kernels.spark_yarn import is_yarn
    from scalelab.store import protocols

    environ = dict(os.environ)
    conf_dir = str(settings.get("hadoop_conf_dir") or "")
    if conf_dir:
        environ |= {"HADOOP_CONF_DIR": conf_dir, "YARN_CONF_DIR": conf_dir}
    url = str(settings.get("store_url") or "")
    options = dict(settings.get("store_options") or {})
    probes: dict[str, Callable[[], bool]] = {}
    if url:
        probes["store"] = lambda: store_reachable(url, options, environ)
    if is_yarn(str(settings.get("spark_master") or "")):
        probes["yarn"] = lambda: yarn_reachable(environ)
    scheme = protocols.scheme_of(url) if url else ""
    collector = HealthCollector(
        probes,
        lambda: local_servers(app),
        scheme or "file",
        memory_cgroups=lambda: local_memory_cgroups(app),
    )
    REGISTRY.register(collector)
    _registered.append(collector)
    collector.start()
    return collector
