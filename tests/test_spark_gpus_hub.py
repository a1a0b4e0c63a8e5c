"""Executor GPUs of Spark applications on a cluster, through a real hub and real servers.

JupyterHub itself (``python -m jupyterhub`` on ScaleLab's generated configuration, as
``tests/test_gpu_restart.py`` runs it, so that it can restart), a declared inventory of two fake
GPUs (no GPU on this machine), and the course's rule "at most 4 GPUs per application from a
week ago" as a dated limit. The kernel's side asks with the server's own environment
(``JUPYTERHUB_API_URL``, its token); no Spark cluster is started: a refused session never
reaches Spark, and a granted one's executors are the cluster's business.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import psutil
import pytest
import requests

from scalelab.kernels.spark_gpu_grant import ExecutorGPUsRefused, claim
from scalelab.kernels.spark_session import SparkStartError, begin
from tests.hubproc import TWO_FAKE_GPUS, PlainHub

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


def _cluster_conf(executors: int, app: str) -> dict[str, str]:
    return {
        "spark.master": "spark://127.0.0.1:7077",
        "spark.app.name": app,
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.instances": str(executors),
    }


@pytest.mark.integration
def test_cluster_gpus_are_granted_within_the_course_limits_and_released_with_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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

        # the kernel's side, with her server's environment: refused before Spark starts
        with pytest.raises(ExecutorGPUsRefused) as refused:
            claim(_cluster_conf(5, "scalelab-alice"), alice)
        assert "asks the cluster for 5 executor GPU(s)" in str(refused.value)
        assert "at most 4" in str(refused.value)
        for key in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_USER"):
            monkeypatch.setenv(key, alice[key])
        monkeypatch.setenv("SCALELAB_SPARK_MASTER", "spark://127.0.0.1:7077")
        monkeypatch.setenv(
            "SCALELAB_SPARK_CONF",
            '{"spark.executor.resource.gpu.amount": "1", "spark.executor.instances": "5"}',
        )
        namespace: dict = {}
        begin(namespace, None, None)
        with pytest.raises(SparkStartError, match="the hub refused \\(HTTP 400\\)"):
            namespace["spark"].wait(timeout=60)
        # granted, then given back by the kernel
        release = claim(_cluster_conf(2, "scalelab-alice"), alice)
        assert release is not None and held() == (3, [("scalelab-alice", 2)])
        release()
        assert held() == (1, [])
        assert claim(_cluster_conf(3, "scalelab-alice"), alice) is not None

        # a hub restart keeps the grant (in her server's saved state)
        hub.stop()
        hub.start()
        assert held() == (4, [("scalelab-alice", 3)])
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
