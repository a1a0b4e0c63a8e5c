"""Benchmark: REST POST -> ready server through Slurm, ScaleLab's spawner against batchspawner's.

Starts the real two-node Slurm of ``tests/support/slurmcluster.py`` (4 GPUs as GRES; needs root and
Debian's slurm-wlm, see install.sh) and two real hubs on ScaleLab's generated configuration:
one with ``ScaleLabSlurmSpawner`` (profile ``gpu-1``: ``--gres=gpu:1``), one with batchspawner's
plain ``SlurmSpawner`` asking the same (``req_gres = "gpu:1"``), the same server command, the
same homes and the same batch script. The baseline's only changes are where a student's home
is (the bench's users are not system users, which batchspawner's ``pwd`` lookup needs) and
``state_exechost_exp`` (the nodes' NodeAddr, as their names do not resolve here). Spawns
alternate between the two, each a new user, each server stopped before the next spawn.

Then 20 concurrent GPU requests on the ScaleLab hub, for 4 GPUs: the 4 served must hold 4
different GPUs (node and GRES index from their spawner state), and each of the 16 others must
see its place in Slurm's queue on its pending page (progress events).

Prints one JSON object: ``scalelab_median_s``, ``baseline_median_s``, ``ratio_median``
(ScaleLab / batchspawner; the goal is <= 1.05), ``spawns`` per spawner; ``concurrent``:
``{"requests", "served", "queued_with_place", "gpus_given_twice"}``; load figures
(``bench/_run_info.py``). ``--quick``: 3 spawns each and 8 concurrent requests.

Usage: ``.venv/bin/python bench/slurm_spawn.py [--quick]`` from the repository root, as root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from tests.support.hubproc import PlainHub, progress_events
from tests.support.slurmcluster import SlurmTestCluster, missing_commands

COMMON = """
c.{cls}.exec_prefix = ""
c.{cls}.args = ["--allow-root"]
c.{cls}.environment = {{"SLURM_CONF": {conf!r}}}
c.{cls}.startup_poll_interval = 0.5
c.{cls}.req_runtime = "30"
c.JupyterHub.cleanup_servers = True
"""

SCALELAB = """
c.JupyterHub.spawner_class = "scalelab.spawner.slurm.ScaleLabSlurmSpawner"
c.ScaleLabSlurmSpawner.store_url = {store!r}
c.ScaleLabSlurmSpawner.kernelspec_path = [{kernels!r}]
c.ScaleLabSlurmSpawner.home_root = {homes!r}
c.ScaleLabSlurmSpawner.gpu_queue_file = ""
c.ScaleLabSlurmSpawner.slurm_queue_poll_interval = 1
# a job pending in Slurm's queue is a pending spawn: scalelab up's limit (10) would answer 429
c.JupyterHub.concurrent_spawn_limit = 40
"""

BASELINE = """
import os, sys
from batchspawner import SlurmSpawner
from traitlets import default

class BenchSlurmSpawner(SlurmSpawner):
    # batchspawner's SlurmSpawner; only the home is not looked up in pwd
    @default("req_homedir")
    def _req_homedir_default(self):
        home = os.path.join({homes!r}, self.user.name)
        os.makedirs(home, exist_ok=True)
        return home

    def user_env(self, env):
        env["USER"] = self.user.name
        env["HOME"] = self.req_homedir
        return env

c.JupyterHub.spawner_class = BenchSlurmSpawner
c.BenchSlurmSpawner.req_gres = "gpu:1"
# batchspawner reaches the server at the node's name; the test nodes' names do not resolve, so
# its own setting maps them to their NodeAddr (ScaleLab's spawner asks scontrol for it)
c.BenchSlurmSpawner.state_exechost_exp = "127.0.0.1"
c.BenchSlurmSpawner.cmd = [os.path.join(os.path.dirname(sys.executable), "jupyterhub-singleuser")]
c.BenchSlurmSpawner.batchspawner_singleuser_cmd = os.path.join(
    os.path.dirname(sys.executable), "batchspawner-singleuser")
c.Spawner.default_url = "/lab"
"""


def spawn_seconds(hub: PlainHub, user: str, options: dict | None) -> float:
    """Seconds from the REST POST to a ready server; the server is stopped afterwards."""
    hub.api("POST", f"/users/{user}")
    body = {"user_options": options} if options else None
    start = time.perf_counter()
    response = hub.api("POST", f"/users/{user}/server", json=body)
    assert response.status_code in (201, 202), response.text
    while True:
        server = hub.api("GET", f"/users/{user}").json()["servers"].get("")
        if server and server["ready"]:
            elapsed = time.perf_counter() - start
            break
        if time.perf_counter() - start > 120:
            lines = (hub.state / "hub.log").read_text(errors="replace").splitlines()
            log = "\n".join([line for line in lines if "GET /hub/api/users" not in line][-30:])
            raise AssertionError(f"{user}'s server never got ready; the hub's log ends:\n{log}")
        time.sleep(0.05)
    hub.api("DELETE", f"/users/{user}/server")
    while hub.api("GET", f"/users/{user}").json()["servers"]:
        time.sleep(0.1)
    return elapsed


def concurrent(hub: PlainHub, requests: int, gpus: int) -> dict:
    """``requests`` GPU servers asked at once; who got which GPU, who sees a place."""
    users = [f"c{i:03d}" for i in range(requests)]
    for user in users:
        hub.api("POST", f"/users/{user}")

    def ask(user: str) -> int:
        body = {"user_options": {"profile": "gpu-1"}}
        return hub.api("POST", f"/users/{user}/server", json=body).status_code

    with ThreadPoolExecutor(max_workers=requests) as pool:
        codes = list(pool.map(ask, users))
    assert all(code in (201, 202) for code in codes), codes
    deadline = time.monotonic() + 120
    served: dict[str, tuple[str, int]] = {}
    while time.monotonic() < deadline and len(served) < gpus:
        for user in users:
            server = hub.api("GET", f"/users/{user}").json()["servers"].get("")
            if server and server["ready"] and user not in served:
                slurm = server["state"]["slurm"]
                served[user] = (slurm["node"], slurm["gpus"][0])
        time.sleep(0.5)
    waiting = [u for u in users if u not in served]

    def place(user: str) -> int | None:
        events = progress_events(hub, user, lambda e: "position" in e.get("slurm", {}), 60)
        return events[-1]["slurm"]["position"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        places = list(pool.map(place, waiting))
    for user in users:
        hub.api("DELETE", f"/users/{user}/server")
    return {
        "requests": requests,
        "gpus": gpus,
        "served": len(served),
        "queued_with_place": sum(p is not None for p in places),
        "places": sorted(p for p in places if p is not None),
        "gpus_given_twice": len(served) - len(set(served.values())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 spawns each, 8 concurrent")
    args = parser.parse_args()
    if missing_commands() or os.geteuid() != 0:
        sys.exit("bench/slurm_spawn.py needs root and Debian's Slurm (./install.sh installs it)")
    info = RunInfo()
    n = 3 if args.quick else 10
    with tempfile.TemporaryDirectory(prefix="scalelab-slurm-bench-") as tmp:
        cluster = SlurmTestCluster(Path(tmp) / "slurm")
        cluster.start()
        os.environ["SLURM_CONF"] = str(cluster.conf)  # the hubs' own squeue and scontrol
        conf = str(cluster.conf)
        s_state, b_state = Path(tmp) / "scalelab", Path(tmp) / "baseline"
        s_state.mkdir()
        b_state.mkdir()
        scalelab = PlainHub(
            s_state,
            SCALELAB.format(
                store=(s_state / "store").as_uri(),
                kernels=str(s_state / "share" / "jupyter"),
                homes=str(s_state / "homes"),
            )
            + COMMON.format(cls="ScaleLabSlurmSpawner", conf=conf),
            warm_spark=True,  # the product as shipped
        )
        baseline = PlainHub(
            b_state,
            BASELINE.format(homes=str(b_state / "homes"))
            + COMMON.format(cls="BenchSlurmSpawner", conf=conf),
            warm_spark=True,  # nothing added to the baseline's arguments
        )
        times: dict[str, list[float]] = {"scalelab": [], "baseline": []}
        try:
            scalelab.start()
            baseline.start()
            for i in range(n):
                order = [
                    ("scalelab", scalelab, {"profile": "gpu-1"}),
                    ("baseline", baseline, None),
                ]
                for name, hub, options in order if i % 2 == 0 else order[::-1]:
                    times[name].append(spawn_seconds(hub, f"{name[0]}{i:03d}", options))
            baseline.close()
            crowd = concurrent(scalelab, 8 if args.quick else 20, 4)
        finally:
            scalelab.close()
            baseline.close()
            cluster.stop()
    s, b = statistics.median(times["scalelab"]), statistics.median(times["baseline"])
    print(
        json.dumps(
            {
                "scalelab_median_s": round(s, 3),
                "baseline_median_s": round(b, 3),
                "ratio_median": round(s / b, 3),
                "spawns": n,
                "baseline": "batchspawner 1.3.0 SlurmSpawner, --gres=gpu:1, same command",
                "concurrent": crowd,
                **info.figures(),
            }
        )
    )


if __name__ == "__main__":
    main()
