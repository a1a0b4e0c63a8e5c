"""Benchmark: REST POST -> ready server, ScaleLab's spawner against JupyterHub's own.

Two real hubs run side by side on ScaleLab's generated configuration: one with
``ScaleLabSpawner`` (CPU-only spawns: no GPU asked), one with JupyterHub's
``SimpleLocalProcessSpawner`` (the baseline, same command and home layout). Spawns alternate
between them, each a new user, and each server is stopped before the next spawn.

The baseline is what an operator would run instead: JupyterHub's own
``SimpleLocalProcessSpawner``, the same server command and home layout, on a hub of the same
configuration.

Prints one JSON object: ``scalelab_median_s``, ``baseline_median_s``, ``ratio_median``
(ScaleLab / baseline; the goal is <= 1.05), ``spawns`` per spawner;
``scalelab_hub_cpu_median_s`` and ``baseline_hub_cpu_median_s``: CPU seconds (user + system)
of the hub's process tree per spawn, from the POST until the stopped server is gone (the hub,
the proxy, the server while it lives and, once the hub has reaped it, the server's too), with
``cpu_ratio_median``; the load average at the start and end (``load_avg_at_start``,
``load_avg_at_end``, ``load_avg_1m_at_start``) and the bench's own wall and CPU seconds
(``bench_*``). ``--quick`` does 3 spawns each instead of 20 and finishes within about a minute.

Usage: ``.venv/bin/python bench/spawn_overhead.py [--quick]`` from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo, tree_cpu_seconds
from tests.support.hubproc import PlainHub  # the same harness as the integration tests

BASELINE = """
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = {homes!r} + "/{{username}}"
c.SimpleLocalProcessSpawner.cmd = [{python!r}, "-m", "jupyterhub.singleuser"]
c.SimpleLocalProcessSpawner.args = {args!r}
c.Spawner.default_url = "/lab"
"""


def spawn_seconds(hub: PlainHub, user: str) -> tuple[float, float]:
    """(seconds from the REST POST to a ready server, CPU seconds of the hub's process tree
    from the POST until the stopped server is gone); the server is stopped afterwards."""
    hub.api("POST", f"/users/{user}")
    cpu = tree_cpu_seconds(hub.proc.pid)
    start = time.perf_counter()
    response = hub.api("POST", f"/users/{user}/server")
    assert response.status_code in (201, 202), response.text
    while True:
        server = hub.api("GET", f"/users/{user}").json()["servers"].get("")
        if server and server["ready"]:
            elapsed = time.perf_counter() - start
            break
        time.sleep(0.05)
    hub.api("DELETE", f"/users/{user}/server")
    while hub.api("GET", f"/users/{user}").json()["servers"]:
        time.sleep(0.1)
    return elapsed, tree_cpu_seconds(hub.proc.pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 spawns each instead of 20")
    args = parser.parse_args()
    info = RunInfo()
    n = 3 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="scalelab-bench-") as tmp:
        scalelab = PlainHub(Path(tmp) / "scalelab", warm_spark=True)  # as shipped
        base_state = Path(tmp) / "baseline"
        baseline = PlainHub(
            base_state,
            BASELINE.format(
                homes=str(base_state / "homes"),
                python=sys.executable,
                args=["--allow-root"] if os.geteuid() == 0 else [],
            ),
            warm_spark=True,  # nothing added to the baseline's arguments
        )
        times: dict[str, list[float]] = {"scalelab": [], "baseline": []}
        cpu: dict[str, list[float]] = {"scalelab": [], "baseline": []}
        try:
            scalelab.start()
            baseline.start()
            for i in range(n):
                order = [("scalelab", scalelab), ("baseline", baseline)]
                for name, hub in order if i % 2 == 0 else order[::-1]:
                    seconds, cpu_s = spawn_seconds(hub, f"{name[0]}{i:03d}")
                    times[name].append(seconds)
                    cpu[name].append(cpu_s)
        finally:
            scalelab.close()
            baseline.close()
    s, b = statistics.median(times["scalelab"]), statistics.median(times["baseline"])
    sc, bc = statistics.median(cpu["scalelab"]), statistics.median(cpu["baseline"])
    print(
        json.dumps(
            {
                "scalelab_median_s": round(s, 3),
                "baseline_median_s": round(b, 3),
                "ratio_median": round(s / b, 3),
                "spawns": n,
                "scalelab_hub_cpu_median_s": round(sc, 3),
                "baseline_hub_cpu_median_s": round(bc, 3),
                "cpu_ratio_median": round(sc / bc, 3) if bc else None,
                "baseline": "JupyterHub's SimpleLocalProcessSpawner, the same command and homes",
                **info.figures(),
            }
        )
    )


if __name__ == "__main__":
    main()
