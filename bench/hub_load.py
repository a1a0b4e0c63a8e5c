"""Benchmark: the hub's REST API under load, with many users' servers running.

A real hub on ScaleLab's generated configuration (``ScaleLabSpawner``, the GPU board, the idle
culler and the GPU monitor, SQLite, configurable-http-proxy) starts ``servers`` users' servers;
they are light stand-ins (``bench/tiny_server.py``: one small stdlib HTTP process each), since
50 JupyterLab servers do not fit a 2-core machine's minute. Then ``requests`` REST calls are
made to the hub through the proxy, ``concurrency`` (200) at a time, with an admin's generated
token: each is one of
``GET /hub/api/users/<name>``, ``GET /hub/api/users?state=active``, ``GET /hub/api/`` and
``GET /hub/api/scalelab/gpus``, in turn.

In the same run, the same load goes to a baseline: a plain JupyterHub with none of ScaleLab's
configuration (:class:`BareHub`: ``SimpleLocalProcessSpawner`` starting the same tiny servers,
SQLite, configurable-http-proxy, JupyterHub's defaults otherwise). It has no GPU board, so its
fourth call is ``GET /hub/api/`` again, the cheapest of JupyterHub's (the ratio errs against
ScaleLab). Both hubs run side by side and take the load in turns, in up to 5 rounds each
(each round ``concurrency`` calls or more, the order alternating), so that other work on the
machine falls on both alike; only one is loaded at a time.

Prints one JSON object: ``servers``, ``requests``, ``concurrency``, ``p50_ms``, ``p99_ms``
(the goal is < 250), ``failures`` (anything but HTTP 200, or no answer in 60 s; must be 0),
``hub_rss_mib`` (the hub process's resident memory after the load), ``spawn_s`` (seconds to
start every server), ``hub_cpu_ms_per_request`` (the hub process's CPU time during the load,
user + system, per request: the service time that queueing multiplies, and steadier than
latency on a shared machine); the baseline's ``baseline_p50_ms``, ``baseline_p99_ms``,
``baseline_failures``, ``baseline_hub_rss_mib``, ``baseline_hub_cpu_ms_per_request``;
``p99_ratio`` and ``hub_cpu_ratio`` (ScaleLab / baseline); ``load_avg_1m_at_start``
(``os.getloadavg()`` before the first hub starts: other work on the machine shows there).
``--quick`` (20 servers, 200 requests per hub) finishes within about a minute; the default is
50 servers and 2,000 requests. ``--no-baseline`` measures ScaleLab's hub only; ``--py-spy
FILE`` records ScaleLab's hub with py-spy (``pip install py-spy``) during the load: a flame
graph (SVG), or py-spy's raw collapsed stacks when FILE ends in ``.txt``.

Usage: ``.venv/bin/python bench/hub_load.py [--quick]`` from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scalelab.commands.up import find_proxy, free_port
from tests.hubproc import PlainHub  # the same harness as the integration tests

TINY = """
c.ScaleLabSpawner.cmd = [{python!r}, {tiny!r}]
c.JupyterHub.concurrent_spawn_limit = {batch}
"""

#: A plain JupyterHub: nothing of ScaleLab's (no spawner, handlers, templates or services).
BARE = """\
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{state}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = "{state}/jupyterhub.pid"
c.JupyterHub.concurrent_spawn_limit = {batch}
c.ConfigurableHTTPProxy.command = {proxy!r}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = "{state}/jupyterhub-proxy.pid"
c.JupyterHub.authenticator_class = "null"
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = "{state}/homes/{{username}}"
c.SimpleLocalProcessSpawner.cmd = [{python!r}, {tiny!r}]
c.JupyterHub.services = [{{"name": "tests", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["tests"]}}]
"""

SCALELAB_PATHS = ["/users/{user}", "/users?state=active", "/", "/scalelab/gpus"]
BASELINE_PATHS = ["/users/{user}", "/users?state=active", "/", "/"]


class BareHub(PlainHub):
    """A plain JupyterHub (``BARE``) run by :class:`~tests.hubproc.PlainHub`'s start and close."""

    def __init__(self, state: Path, tiny: str, batch: int):
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = os.urandom(16).hex()
        (state / "homes").mkdir(parents=True)
        self.config = state / "jupyterhub_config.py"
        self.config.write_text(
            BARE.format(
                port=self.port,
                hub_port=free_port(),
                proxy_api_port=free_port(),
                state=state,
                batch=batch,
                proxy=find_proxy(),
                python=sys.executable,
                tiny=tiny,
                token=self.token,
            )
        )
        self.proc = None
        self.log = open(state / "hub.log", "ab")


def start_servers(hub: PlainHub, users: list[str], batch: int) -> None:
    """Start every user's server, ``batch`` spawns pending at a time (the spawn limit)."""
    for user in users:
        assert hub.api("POST", f"/users/{user}").status_code == 201
    for first in range(0, len(users), batch):
        group = users[first : first + batch]
        for user in group:
            response = hub.api("POST", f"/users/{user}/server")
            assert response.status_code in (201, 202), response.text
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            listed = hub.api("GET", "/users", params={"state": "ready"}).json()
            ready = {u["name"] for u in listed}
            if set(group) <= ready:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"servers not ready in 120 s: {sorted(set(group) - ready)}")


def admin_token(hub: PlainHub) -> str:
    """A token the hub generated for an admin user (as tokens of users and managed services
    are): a token written into the configuration costs 16,384 SHA-512 rounds at every request,
    a generated one a single round."""
    assert hub.api("POST", "/users/bench-admin", json={"admin": True}).status_code == 201
    response = hub.api("POST", "/users/bench-admin/tokens", json={"note": "hub_load"})
    assert response.status_code == 201, response.text
    return response.json()["token"]


def load(
    hub: PlainHub,
    token: str,
    users: list[str],
    count: int,
    concurrency: int,
    paths: list[str] = SCALELAB_PATHS,
) -> tuple[list, int]:
    """``count`` REST calls, ``concurrency`` at a time; (latencies in ms, failures)."""
    local = threading.local()
    start = threading.Barrier(min(concurrency, count))

    def call(i: int) -> float | None:
        if not hasattr(local, "session"):
            local.session = requests.Session()
            local.session.headers["Authorization"] = f"token {token}"
        if i < concurrency:
            start.wait()  # the first wave leaves together: `concurrency` requests in flight
        path = paths[i % len(paths)].format(user=users[i % len(users)])
        began = time.perf_counter()
        try:
            response = local.session.get(f"{hub.url}/hub/api{path}", timeout=60)
        except requests.RequestException:
            return None
        elapsed = (time.perf_counter() - began) * 1000
        return elapsed if response.status_code == 200 else None

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(call, range(count)))
    latencies = [r for r in results if r is not None]
    return latencies, len(results) - len(latencies)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def py_spy(pid: int, out: str) -> subprocess.Popen:
    """py-spy recording process ``pid`` into ``out`` until SIGINT: a flame graph (SVG), or
    py-spy's raw collapsed stacks when ``out`` ends in ``.txt``."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    kind = "raw" if out.endswith(".txt") else "flamegraph"
    argv = [exe, "record", "--pid", str(pid), "--output", out, "--format", kind]
    argv += ["--rate", "200", "--nonblocking"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass
class Target:
    """One hub under test and what was measured on it so far."""

    hub: PlainHub
    paths: list[str]
    users: list[str] = field(default_factory=list)
    token: str = ""
    spawn_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    requests: int = 0
    cpu_s: float = 0.0
    rss_mib: float = 0.0

    def prepare(self, servers: int, batch: int) -> None:
        """Start the hub and ``servers`` users' servers; a token; a small warm-up load."""
        self.hub.start()
        self.users = [f"student{i:03d}" for i in range(servers)]
        began = time.perf_counter()
        start_servers(self.hub, self.users, batch)
        self.spawn_s = time.perf_counter() - began
        self.token = admin_token(self.hub)
        load(self.hub, self.token, self.users, 20, 20, self.paths)

    def round(self, count: int, concurrency: int) -> None:
        """``count`` calls, ``concurrency`` at a time; adds latencies, failures, CPU time."""
        proc = psutil.Process(self.hub.proc.pid)
        cpu = sum(proc.cpu_times()[:2])
        latencies, failures = load(self.hub, self.token, self.users, count, concurrency, self.paths)
        self.cpu_s += sum(proc.cpu_times()[:2]) - cpu
        self.latencies += latencies
        self.failures += failures
        self.requests += count
        self.rss_mib = proc.memory_info().rss / 2**20

    def figures(self) -> dict:
        lat = self.latencies
        return {
            "p50_ms": round(statistics.median(lat), 1) if lat else None,
            "p99_ms": round(percentile(lat, 99), 1) if lat else None,
            "failures": self.failures,
            "hub_rss_mib": round(self.rss_mib, 1),
            "spawn_s": round(self.spawn_s, 1),
            "hub_cpu_ms_per_request": round(self.cpu_s * 1000 / max(self.requests, 1), 2),
        }


def rounds(count: int, concurrency: int) -> list[int]:
    """``count`` calls cut into rounds of at least ``concurrency`` (at most 5 rounds)."""
    size = max(concurrency, -(-count // 5))
    return [min(size, count - first) for first in range(0, count, size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 servers, 200 requests")
    parser.add_argument("--servers", type=int, help="users with a running server (default 50)")
    parser.add_argument("--requests", type=int, help="REST calls (default 2000)")
    parser.add_argument("--concurrency", type=int, default=200, help="calls in flight")
    parser.add_argument("--no-baseline", action="store_true", help="skip the plain JupyterHub")
    parser.add_argument("--py-spy", default="", metavar="SVG", help="profile ScaleLab's hub")
    args = parser.parse_args()
    servers = args.servers or (20 if args.quick else 50)
    count = args.requests or (200 if args.quick else 2000)
    batch = 10
    tiny = str(Path(__file__).with_name("tiny_server.py"))
    load_avg = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="scalelab-hub-load-") as tmp:
        extra = TINY.format(python=sys.executable, tiny=tiny, batch=batch)
        scalelab = Target(PlainHub(Path(tmp) / "state", extra_config=extra), SCALELAB_PATHS)
        targets = [scalelab]
        if not args.no_baseline:
            targets.append(Target(BareHub(Path(tmp) / "baseline", tiny, batch), BASELINE_PATHS))
        recorder = None
        try:
            for target in targets:
                target.prepare(servers, batch)
            if args.py_spy:
                recorder = py_spy(scalelab.hub.proc.pid, args.py_spy)
            for i, size in enumerate(rounds(count, args.concurrency)):
                for target in targets if i % 2 == 0 else targets[::-1]:
                    target.round(size, args.concurrency)
        finally:
            if recorder is not None:
                recorder.send_signal(signal.SIGINT)
                recorder.wait(timeout=60)
            for target in targets:
                target.hub.close()
    result = {"servers": servers, "requests": count, "concurrency": args.concurrency}
    figures = scalelab.figures()
    result.update(figures)
    if len(targets) > 1:
        baseline = targets[1].figures()
        for key in ("p50_ms", "p99_ms", "failures", "hub_rss_mib", "hub_cpu_ms_per_request"):
            result[f"baseline_{key}"] = baseline[key]
        if figures["p99_ms"] and baseline["p99_ms"]:
            result["p99_ratio"] = round(figures["p99_ms"] / baseline["p99_ms"], 2)
        if baseline["hub_cpu_ms_per_request"]:
            cpu = figures["hub_cpu_ms_per_request"] / baseline["hub_cpu_ms_per_request"]
            result["hub_cpu_ratio"] = round(cpu, 2)
    result["load_avg_1m_at_start"] = round(load_avg, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
