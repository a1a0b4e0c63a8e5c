"""A PySpark kernel whose YARN application waits for room (issue 32, "YARN never silent"), on
the test cluster's ResourceManager: another student's application holds the queue's room for
application masters (4,096 MB: half the cluster, the test queue's
``maximum-am-resource-percent``), so YARN keeps the kernel's application ``ACCEPTED``. The
waiting cell is told what holds the queue; interrupting it kills the application; once the room
is free, the next use of ``spark`` starts a new one.

The other student's application is one submitted through the ResourceManager's REST API whose
application master is ``sleep`` (a real container on a real NodeManager). The pure parts:
``tests/unit/test_yarn_wait.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from queue import Empty

import requests

from tests.integration.hadoop.test_spark_yarn import yarn_kernel_environment
from tests.support.hadoopcluster import HadoopTestCluster
from tests.support.kernelrun import Kernel

HOLDER_MB = 4096


def _rm(cluster: HadoopTestCluster, method: str, path: str, **kwargs) -> requests.Response:
    url = f"http://{cluster.yarn['webapp']}/ws/v1/cluster/{path}"
    answer = requests.request(method, url, params={"user.name": "bob"}, timeout=30, **kwargs)
    answer.raise_for_status()
    return answer


def _hold_the_queue(cluster: HadoopTestCluster) -> str:
    """Bob's application: an application master of HOLDER_MB that sleeps; its id once YARN
    has given it its container."""
    app_id = _rm(cluster, "POST", "apps/new-application").json()["application-id"]
    _rm(cluster, "POST", "apps", json={
        "application-id": app_id, "application-name": "scalelab-bob", "application-type": "YARN",
        "am-container-spec": {"commands": {"command": "sleep 600"}},
        "resource": {"memory": HOLDER_MB, "vCores": 1}, "max-app-attempts": 1,
    })  # fmt: skip
    deadline = time.monotonic() + 60
    while cluster.resourcemanager(f"apps/{app_id}")["app"].get("allocatedMB", 0) < HOLDER_MB:
        assert time.monotonic() < deadline, cluster.resourcemanager(f"apps/{app_id}")
        time.sleep(0.5)
    return app_id


def _read_until(kernel: Kernel, marker: str, timeout_s: float) -> str:
    text, deadline = "", time.monotonic() + timeout_s
    while marker not in text:
        assert time.monotonic() < deadline, f"no {marker!r} in the cell's output: {text!r}"
        try:
            msg = kernel.kc.get_iopub_msg(timeout=1)
        except Empty:
            continue
        if msg["msg_type"] == "stream":
            text += msg["content"]["text"]
    return text


def test_a_waiting_cell_is_told_why_and_an_interrupt_cancels_the_application(
    hdfs_cluster: HadoopTestCluster,
    kernels_dir: Path,
    course_store: str,
    tmp_path: Path,
):
    holder = _hold_the_queue(hdfs_cluster)
    try:
        env = yarn_kernel_environment(hdfs_cluster, kernels_dir, course_store, tmp_path / "logs")
        env["SCALELAB_YARN_WAIT_NOTICE_S"] = "3"
        with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
            msg_id = kernel.kc.execute("spark.range(3).count()")
            told = _read_until(kernel, "to give up, interrupt the kernel", timeout_s=120)
            assert "has waited" in told and "for room in YARN queue 'root.default'" in told, told
            assert "(state ACCEPTED: Application is added to the scheduler" in told, told
            assert "Queue's AM resource limit exceeded.)" in told, told
            assert f"others: 1 application(s) of 1 user(s), {HOLDER_MB:,} MB" in told, told
            waiting = told.split("your Spark application ")[1].split()[0]
            kernel.km.interrupt_kernel()
            cancelled = _read_until(kernel, "the next use of spark starts a new one", 60)
            assert f"cancelled the waiting Spark application {waiting}" in cancelled
            reply = kernel.reply_to(msg_id, timeout_s=60)
            assert reply["content"]["ename"] == "KeyboardInterrupt"
            assert hdfs_cluster.resourcemanager(f"apps/{waiting}")["app"]["state"] == "KILLED"
            # Room again: the next use of spark starts a new application, which runs.
            _rm(hdfs_cluster, "PUT", f"apps/{holder}/state", json={"state": "KILLED"})
            again = kernel.run("spark.range(3).count()", timeout_s=300)
            if again["status"] == "aborted":  # ipykernel's stop_on_error: a request that came
                again = kernel.run("spark.range(3).count()", timeout_s=300)  # as it aborted
            assert again["error"] is None and again["result"] == "3", again
            started = kernel.run("spark.sparkContext.applicationId")["result"].strip("'")
            assert started != waiting
    finally:
        _rm(hdfs_cluster, "PUT", f"apps/{holder}/state", json={"state": "KILLED"})
