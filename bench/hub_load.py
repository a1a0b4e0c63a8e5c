"""Benchmark: the hub's REST API under load, with many users' servers running, against a plain hub.

A real hub on ScaleLab's generated configuration (``ScaleLabSpawner``, the GPU board, the idle
culler and the GPU monitor, SQLite, configurable-http-proxy) starts ``servers`` users' servers;
they are light stand-ins (``bench/tiny_server.py``: one small stdlib HTTP process each), since
50 JupyterLab servers do not fit a 2-core machine's minute. Then ``requests`` REST calls are
made to the hub through the proxy, ``concurrency`` (200) at a time, with an admin's generated
token, each one of ``GET /hub/api/users/<name>``, ``GET /hub/api/users?state=active`` and
``GET /hub/api/``, in turn (``request_mix``).

The baseline is what an operator would run instead: a plain JupyterHub with none of
ScaleLab's configuration (:class:`BareHub`: ``SimpleLocalProcessSpawner`` starting the same
tiny servers, SQLite, configurable-http-proxy, JupyterHub's defaults otherwise). It takes the
same request mix, so ``p99_ratio`` and ``hub_cpu_ratio`` measure what ScaleLab adds to the
same work. ScaleLab's GPU board (``GET /hub/api/scalelab/gpus``) has no counterpart on a
plain hub: it is timed apart, on ScaleLab's hub, as many calls as the mix and as many at a
time (``gpu_board_*``), and is in neither ratio. Both hubs run side by side; the three loads
(ScaleLab's mix, the baseline's mix, the GPU board) take turns in up to 5 rounds (each round
``concurrency`` calls or more), the order rotated by one each round, so that other work on
the machine falls on all alike; only one load runs at a time.

Prints one JSON object: ``servers``, ``requests``, ``concurrency``, ``request_mix``,
``p50_ms``, ``p99_ms`` (the goal is < 250), ``failures`` (anything but HTTP 200, or no answer
in 60 s; must be 0), ``hub_rss_mib`` (the hub process's resident memory after the load),
``hub_peak_rss_mib`` (its peak, the kernel's ``VmHWM``), ``spawn_s`` (seconds to start every
server), ``hub_cpu_ms_per_request`` (the hub process's CPU time during the load, user +
system, per request: the service time that queueing multiplies, and steadier than latency on
a shared machine); the same for the baseline as ``baseline_*``; ``p99_ratio`` and
``hub_cpu_ratio`` (ScaleLab / baseline, same mix); ``gpu_board_p50_ms``, ``gpu_board_p99_ms``,
``gpu_board_failures``, ``gpu_board_hub_cpu_ms_per_request``; the load average at the start
and end (``load_avg_at_start``, ``load_avg_at_end``, ``load_avg_1m_at_start``: other work on
the machine shows there) and the bench's own CPU seconds (the load generator, ``bench_cpu_s``).
``--quick`` (20 servers, 400 requests per load: 2 rounds) takes about half a minute on 2
busy cores; the default, 50 servers and 2,000 requests per load (5 rounds), about a minute
and a half. ``--no-baseline`` measures ScaleLab's hub only; ``--py-spy FILE`` records
ScaleLab's hub with py-spy (``pip install py-spy``) during the load: a flame graph (SVG), or
py-spy's raw collapsed stacks when FILE ends in ``.txt``.

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

from bench._run_info import RunInfo, vm_hwm
from scalelab.commands.up import find_proxy
from scalelab.common.ports import free_port
from tests.support.hubproc import PlainHub  # the same harness as the integration tests

TINY = """
c.ScaleLabSpawner.cmd = [{python!r}, {tiny!r}]
c.JupyterHub.concurrent_spawn_limit = {batch}
"""

#: A plain JupyterHub's own parts on loopback (ports, SQLite, configurable-http-proxy), the
#: start of every plain hub the benches run (bench/class_start.py's too).
BARE_HUB = """\
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{state}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = "{state}/jupyterhub.pid"
c.ConfigurableHTTPProxy.command = {proxy!r}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = "{state}/jupyterhub-proxy.pid"
"""

#: A plain JupyterHub: nothing of ScaleLab's (no spawner, handlers, templates or services).
BARE = (
    BARE_HUB
    + """\
c.JupyterHub.concurrent_spawn_limit = {batch}
c.JupyterHub.authenticator_class = "null"
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = "{state}/homes/{{username}}"
c.SimpleLocalProcessSpawner.cmd = [{python!r}, {tiny!r}]
c.JupyterHub.services = [{{"name": "tests", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["tests"]}}]
"""
)

#: The request mix both hubs take: JupyterHub's own REST API, in turn.
MIX_PATHS = ["/users/{user}", "/users?state=active", "/"]
SCALELAB_PATHS = MIX_PATHS
BASELINE_PATHS = MIX_PATHS
#: ScaleLab's GPU board: no counterpart on a plain JupyterHub, so timed apart (not in ratios).
GPU_BOARD_PATHS = ["/scalelab/gpus"]


class BareHub(PlainHub):
    """A plain JupyterHub run by :class:`~tests.support.hubproc.PlainHub`'s start and close, its
    configuration ``template`` (:data:`BARE`, or another that starts with :data:`BARE_HUB`)
    formatted with its ports, state folder, proxy, Python, admin token and password (the bare
    hub ignores the password; PlainHub.start exports it) and ``fields``."""

    def __init__(self, state: Path, template: str = BARE, **fields: object):
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = os.urandom(16).hex()
        self.password = os.urandom(12).hex()
        (state / "homes").mkdir(parents=True)
        self.config = state / "jupyterhub_config.py"
        self.config.write_text(
            template.format(
                port=self.port,
                hub_port=free_port(),
                proxy_api_port=free_port(),
                state=state,
                proxy=find_proxy(),
                python=sys.executable,
                token=self.token,
                password=self.password,
                **fields,
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
    peak_rss_mib: float = 0.0

    def prepare(self, servers: int, batch: int) -> None:
        """Start the hub and ``servers`` users' servers; a token; a small warm-up load."""
        self.hub.start()
        self.users = [f"student{i:03d}" for i in range(servers)]
        began = time.perf_counter()
        start_servers(self.hub, self.users, batch)
        self.spawn_s = time.perf_counter() - began
        self.token = admin_token(self.hub)
        load(self.hub, self.token, self.users, 20, 20, self.paths)

    def same_hub(self, paths: list[str]) -> Target:
        """Another load (``paths``) on this prepared hub, measured apart."""
        other = Target(self.hub, paths, users=self.users, token=self.token)
        load(other.hub, other.token, other.users, 20, 20, other.paths)
        return other

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
        self.peak_rss_mib = vm_hwm(proc.pid) / 2**20

    def figures(self) -> dict:
        lat = self.latencies
        return {
            "p50_ms": round(statistics.median(lat), 1) if lat else None,
            "p99_ms": round(percentile(lat, 99), 1) if lat else None,
            "failures": self.failures,
            "hub_rss_mib": round(self.rss_mib, 1),
            "hub_peak_rss_mib": round(self.peak_rss_mib, 1),
            "spawn_s": round(self.spawn_s, 1),
            "hub_cpu_ms_per_request": round(self.cpu_s * 1000 / max(self.requests, 1), 2),
        }


def rounds(count: int, concurrency: int) -> list[int]:
    """``count`` calls cut into rounds of at least ``concurrency`` (at most 5 rounds)."""
    size = max(concurrency, -(-count // 5))
    return [min(size, count - first) for first in range(0, count, size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 servers, 400 requests")
    parser.add_argument("--servers", type=int, help="users with a running server (default 50)")
    parser.add_argument("--requests", type=int, help="REST calls per load (default 2000)")
    parser.add_argument("--concurrency", type=int, default=200, help="calls in flight")
    parser.add_argument("--no-baseline", action="store_true", help="skip the plain JupyterHub")
    parser.add_argument("--py-spy", default="", metavar="SVG", help="profile ScaleLab's hub")
    args = parser.parse_args()
    info = RunInfo()
    servers = args.servers or (20 if args.quick else 50)
    count = args.requests or (400 if args.quick else 2000)
    batch = 10
    tiny = str(Path(__file__).with_name("tiny_server.py"))
    with tempfile.TemporaryDirectory(prefix="scalelab-hub-load-") as tmp:
        extra = TINY.format(python=sys.executable, tiny=tiny, batch=batch)
        scalelab = Target(
            PlainHub(Path(tmp) / "state", extra_config=extra, warm_spark=True), SCALELAB_PATHS
        )
        baseline = None
        if not args.no_baseline:
            baseline = Target(
                BareHub(Path(tmp) / "baseline", tiny=tiny, batch=batch), BASELINE_PATHS
            )
        hubs = [t for t in (scalelab, baseline) if t is not None]
        recorder = None
        try:
            for target in hubs:
                target.prepare(servers, batch)
            board = scalelab.same_hub(GPU_BOARD_PATHS)
            loads = [*hubs, board]
            if args.py_spy:
                recorder = py_spy(scalelab.hub.proc.pid, args.py_spy)
            for i, size in enumerate(rounds(count, args.concurrency)):
                shift = i % len(loads)
                for target in loads[shift:] + loads[:shift]:
                    target.round(size, args.concurrency)
        finally:
            if recorder is not None:
                recorder.send_signal(signal.SIGINT)
                recorder.wait(timeout=60)
            for target in hubs:
                target.hub.close()
    result = {"servers": servers, "requests": count, "concurrency": args.concurrency}
    result["request_mix"] = ["GET /hub/api" + p for p in MIX_PATHS]
    figures = scalelab.figures()
    result.update(figures)
    if baseline is not None:
        result["baseline"] = (
            "plain JupyterHub (SimpleLocalProcessSpawner, the same stand-in servers, SQLite, "
            "configurable-http-proxy, JupyterHub's defaults), the same request mix"
        )
        base = baseline.figures()
        for key in (
            "p50_ms", "p99_ms", "failures", "hub_rss_mib", "hub_peak_rss_mib", "spawn_s",
            "hub_cpu_ms_per_request",
        ):  # fmt: skip
            result[f"baseline_{key}"] = base[key]
        if figures["p99_ms"] and base["p99_ms"]:
            result["p99_ratio"] = round(figures["p99_ms"] / base["p99_ms"], 2)
        if base["hub_cpu_ms_per_request"]:
            cpu = figures["hub_cpu_ms_per_request"] / base["hub_cpu_ms_per_request"]
            result["hub_cpu_ratio"] = round(cpu, 2)
    gpu = board.figures()
    for key in ("p50_ms", "p99_ms", "failures", "hub_cpu_ms_per_request"):
        result[f"gpu_board_{key}"] = gpu[key]
    result["gpu_board_requests"] = board.requests
    result["gpu_board_note"] = (
        "GET /hub/api/scalelab/gpus, ScaleLab's only: no counterpart on a plain JupyterHub, "
        "so timed apart on ScaleLab's hub and in neither ratio"
    )
    result.update(info.figures())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
