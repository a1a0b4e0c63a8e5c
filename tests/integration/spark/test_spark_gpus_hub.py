"""Executor GPUs of Spark applications on a cluster, through a real hub and real servers.

JupyterHub itself (``python -m jupyterhub`` on ScaleLab's generated configuration, as
``tests/integration/hub/test_gpu_restart.py`` runs it, so that it can restart), a declared
inventory of two fake
GPUs (no GPU on this machine), and the course's rule "at most 4 GPUs per application from a
week ago" as a dated limit. The kernel's side asks with the server's own environment
(``JUPYTERHUB_API_URL``, its token), from a real PySpark kernel: a refused session never
reaches Spark; a granted one starts on the module's two-worker standalone cluster (its
executors wait for GPUs the workers do not have: the cluster's business, not the hub's).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import psutil
import requests

from scalelab.kernels.spark_gpu_grant import claim
from tests.support.hubproc import TWO_FAKE_GPUS, PlainHub
from tests.support.kernelrun import Kernel

WEEK_AGO = (dt.date.today() - dt.timedelta(days=7)).isoformat()
CONFIG = (
    TWO_FAKE_GPUS
    + "c.JupyterHub.cleanup_servers = False\n"  # servers outlive a hub restart, as ops run it
    + "c.JupyterHub.cleanup_proxy = False\n"
    + "c.GPUPolicy.max_gpus_per_user = 6\n"
    + f"c.GPUPolicy.dated_limits = [{{'from': '{WEEK_AGO}', 'max_gpus_per_application': 4}}]\n"
)


def _server_environ(hub: PlainHub, user: str) -> dict[str, str]:
    for proc in psutil.process_iter(["cmdline"]):
        try:
            env = proc.environ()
            if (
                "jupyterhub.singleuser" in (proc.info["cmdline"] or [])
                and env.get("JUPYTERHUB_USER") == user
                and env.get("HOME", "").startswith(str(hub.state))
            ):
                return env
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise AssertionError(f"no server process of {user}")


def _executor_gpus(executors: int) -> dict[str, str]:
    """Ops' Spark settings (``c.ScaleLabSpawner.spark_conf``) asking for one GPU an executor."""
    return {
        "spark.executor.resource.gpu.amount": "1",
        "spark.task.resource.gpu.amount": "1",
        "spark.executor.instances": str(executors),
    }


def _cluster_conf(executors: int, app: str) -> dict[str, str]:
    return {
        "spark.master": "spark://127.0.0.1:7077",
        "spark.app.name": app,
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.instances": str(executors),
    }


def test_cluster_gpus_are_granted_within_the_course_limits_and_released_with_the_server(
    tmp_path: Path, kernel_environment: dict[str, str], two_workers: str
):
    hub = PlainHub(tmp_path / "state", CONFIG)
    try:
        hub.start()
        hub.start_server("alice", {"profile": "gpu-1"})
        hub.start_server("bob", {"profile": "cpu"})
        alice = _server_environ(hub, "alice")
        url = f"{alice['JUPYTERHUB_API_URL']}/scalelab/users/alice/spark-gpus"

        def as_server(env: dict, method: str, **kwargs) -> requests.Response:
            headers = {"Authorization": f"token {env['JUPYTERHUB_API_TOKEN']}"}
            return requests.request(method, url, headers=headers, timeout=30, **kwargs)

        def post(app: str, gpus: int) -> requests.Response:
            return as_server(alice, "POST", json={"server": "", "application": app, "gpus": gpus})

        def held() -> tuple[int, list[tuple[str, int]]]:
            answer = hub.api("GET", "/scalelab/users/alice/spark-gpus").json()
            return answer["held"], [(g["application"], g["gpus"]) for g in answer["grants"]]

        # the dated cap of 4 per application refuses 5, naming the limit and the fix
        over = post("train", 5)
        assert over.status_code == 400, over.text
        assert f"at most 4 (limit from {WEEK_AGO})" in over.json()["message"]
        assert "spark.executor.instances" in over.json()["message"]
        # 4 fit, and count with the GPU her server holds
        granted = post("train", 4)
        assert granted.status_code == 200, granted.text
        assert granted.json()["grant"]["gpus"] == 4 and granted.json()["held"] == 5
        assert held() == (5, [("train", 4)])
        # over her own limit with what she holds: 409 with the numbers
        full = post("search", 2)
        assert full.status_code == 409, full.text
        assert "would give you 7, but you may hold at most 6" in full.json()["message"]
        # bob's server's token cannot ask (or release) in alice's name: JupyterHub's answer to a
        # token without the scope on that user is 404 "No access"
        forged = as_server(
            _server_environ(hub, "bob"), "POST", json={"application": "x", "gpus": 1}
        )
        assert forged.status_code == 404 and "No access" in forged.json()["message"]
        released = as_server(_server_environ(hub, "bob"), "DELETE", params={"application": "train"})
        assert released.status_code == 404
        assert held() == (5, [("train", 4)])
        # release frees
        assert as_server(alice, "DELETE", params={"application": "train"}).status_code == 204
        assert held() == (1, [])

        # the kernel's side: a real PySpark kernel with her server's environment and the
        # two-worker standalone cluster as its master. Refused: the cell says why, no Spark.
        kernel_env = {
            **kernel_environment,
            **{k: alice[k] for k in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN")},
            "JUPYTERHUB_USER": "alice",
            "JUPYTERHUB_SERVER_NAME": "",
            "SCALELAB_SPARK_MASTER": two_workers,
            "SCALELAB_SPARK_CONF": json.dumps(_executor_gpus(5)),
        }
        with Kernel("scalelab-pyspark", kernel_env, cwd=str(tmp_path)) as kernel:
            out = kernel.run("spark.range(3).count()", timeout_s=120)
        assert out["error"] is not None and out["error"][0] == "SparkStartError", out
        assert (
            "ScaleLab did not start Spark: your session asks the cluster for 5 executor GPU(s)"
            in (out["error"][1])
        )
        assert f"at most 4 (limit from {WEEK_AGO})" in out["error"][1]
        assert held() == (1, [])
        # granted: the session starts on the cluster; spark.stop() gives the GPUs back
        kernel_env["SCALELAB_SPARK_CONF"] = json.dumps(_executor_gpus(2))
        with Kernel("scalelab-pyspark", kernel_env, cwd=str(tmp_path)) as kernel:
            out = kernel.run("print(spark.sparkContext.master)", timeout_s=300)
            assert out["error"] is None and out["stdout"].strip().splitlines()[-1] == two_workers, (
                out
            )
            pid = kernel.run("import os; print(os.getpid())")["stdout"].strip().splitlines()[-1]
            assert held() == (3, [(f"scalelab-alice-{pid}", 2)])
            assert kernel.run("spark.stop()")["error"] is None
            assert held() == (1, [])
        # given back by a kernel that asked directly (the kernel's client, its release)
        release = claim(_cluster_conf(2, "scalelab-alice"), alice)
        mine = f"scalelab-alice-{os.getpid()}"
        assert release is not None and held() == (3, [(mine, 2)])
        release()
        assert held() == (1, [])
        assert claim(_cluster_conf(3, "scalelab-alice"), alice) is not None

        # a hub restart keeps the grant (in her server's saved state)
        hub.stop()
        hub.start()
        assert held() == (4, [(mine, 3)])
        # ops see it on the GPU board (in no GPU's row: the cluster placed it)
        board = hub.api("GET", "/scalelab/gpus").json()
        assert [(a["user"], a["application"], a["gpus"]) for a in board["spark"]] == [
            ("alice", mine, 3)
        ]
        assert "scalelab_spark_executor_gpus_granted 3.0" in hub.api("GET", "/../metrics").text
        # her server stops: the hub releases its grants with its GPU
        assert hub.api("DELETE", "/users/alice/server").status_code in (202, 204)
        deadline = time.monotonic() + 60
        while held() != (0, []) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert held() == (0, [])
        assert "released the 3 executor GPU(s)" in (hub.state / "hub.log").read_text()
        hub.api("DELETE", "/users/bob/server")
    finally:
        hub.close()
