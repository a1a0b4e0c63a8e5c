"""Benchmark: the hub's REST API under load, with many users' servers running.

A real hub on ScaleLab's generated configuration (``ScaleLabSpawner``, the GPU board, the idle
culler and the GPU monitor, SQLite, configurable-http-proxy) starts ``servers`` users' servers;
they are light stand-ins (``bench/tiny_server.py``: one small stdlib HTTP process each), since
50 JupyterLab servers do not fit a 2-core machine's minute. Then ``requests`` REST calls are
made to the hub through the proxy, ``concurrency`` (200) at a time, with an admin's generated
token: each is one of
``GET /hub/api/users/<name>``, ``GET /hub/api/users?state=active``, ``GET /hub/api/`` and
``GET /hub/api/scalelab/gpus``, in turn.

Prints one JSON object: ``servers``, ``requests``, ``concurrency``, ``p50_ms``, ``p99_ms``
(the goal is < 250), ``failures`` (anything but HTTP 200, or no answer in 60 s; must be 0),
``hub_rss_mib`` (the hub process's resident memory after the load) and ``spawn_s`` (seconds to
start every server). ``--quick`` (20 servers, 200 requests) finishes within about a minute; the
default is 50 servers and 2,000 requests.

Usage: ``.venv/bin/python bench/hub_load.py [--quick]`` from the repository root.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hubproc import PlainHub  # the same harness as the integration tests

TINY = """
c.ScaleLabSpawner.cmd = [{python!r}, {tiny!r}]
c.JupyterHub.concurrent_spawn_limit = {batch}
"""


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
    hub: PlainHub, token: str, users: list[str], count: int, concurrency: int
) -> tuple[list, int]:
    """``count`` REST calls, ``concurrency`` at a time; (latencies in ms, failures)."""
    paths = ["/users/{user}", "/users?state=active", "/", "/scalelab/gpus"]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 servers, 200 requests")
    parser.add_argument("--servers", type=int, help="users with a running server (default 50)")
    parser.add_argument("--requests", type=int, help="REST calls (default 2000)")
    parser.add_argument("--concurrency", type=int, default=200, help="calls in flight")
    args = parser.parse_args()
    servers = args.servers or (20 if args.quick else 50)
    count = args.requests or (200 if args.quick else 2000)
    batch = 10
    tiny = str(Path(__file__).with_name("tiny_server.py"))
    with tempfile.TemporaryDirectory(prefix="scalelab-hub-load-") as tmp:
        extra = TINY.format(python=sys.executable, tiny=tiny, batch=batch)
        hub = PlainHub(Path(tmp) / "state", extra_config=extra)
        try:
            hub.start()
            users = [f"student{i:03d}" for i in range(servers)]
            began = time.perf_counter()
            start_servers(hub, users, batch)
            spawn_s = time.perf_counter() - began
            token = admin_token(hub)
            concurrency = args.concurrency
            load(hub, token, users, min(count, 20), min(concurrency, 20))  # warm up
            latencies, failures = load(hub, token, users, count, concurrency)
            rss = psutil.Process(hub.proc.pid).memory_info().rss / 2**20
        finally:
            hub.close()
    print(
        json.dumps(
            {
                "servers": servers,
                "requests": count,
                "concurrency": concurrency,
                "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
                "p99_ms": round(percentile(latencies, 99), 1) if latencies else None,
                "failures": failures,
                "hub_rss_mib": round(rss, 1),
                "spawn_s": round(spawn_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
