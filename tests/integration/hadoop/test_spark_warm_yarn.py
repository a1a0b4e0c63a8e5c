"""The warm PySpark kernel on YARN (issue 34, Must 1): a real single-user server whose Spark
master is the test cluster's YARN keeps a kernel whose `spark` is a running YARN application,
the next notebook takes it (the student's identity and the server's settings kept), and one
that waits unused is released: its application ends and its containers are freed.
The same manager on a local master: ``tests/integration/spark/test_spark_warm.py``;
``bench/kernel_start.py --master yarn`` measures it."""

from __future__ import annotations

import getpass
import time
from pathlib import Path

from tests.integration.spark.test_spark_warm import Server, result
from tests.support.hadoopcluster import (
    YARN_SPARK_CONF,
    HadoopTestCluster,
    yarn_server_environment,
)

#: Seconds an unused warm kernel on YARN waits here before it is released.
RELEASE_S = 8


def _app(cluster: HadoopTestCluster, app_id: str) -> dict:
    return cluster.resourcemanager(f"apps/{app_id}")["app"]


def _ended(cluster: HadoopTestCluster, app_id: str, timeout_s: float = 60) -> dict:
    """The application once ended and its containers freed (YARN counts a container until
    its NodeManager reports it gone, a moment after the application's end), or as it is at
    the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        app = _app(cluster, app_id)
        ended = app["state"] in ("FINISHED", "KILLED", "FAILED")
        if (ended and app["runningContainers"] <= 0) or time.monotonic() > deadline:
            return app
        time.sleep(0.5)


def test_an_unused_warm_yarn_kernel_is_released_and_the_next_one_taken(
    hdfs_cluster: HadoopTestCluster, tmp_path: Path
):
    server = Server(
        tmp_path,
        "--WarmKernelManager.rewarm_delay_s=0",
        f"--WarmKernelManager.cluster_release_s={RELEASE_S}",
        env=yarn_server_environment(hdfs_cluster),
    )
    client = None
    try:
        unused = server.warm("ready", timeout_s=300)
        app = _app(hdfs_cluster, unused["app_id"])
        # A YARN application of the server's user, holding its containers while it waits.
        assert app["state"] == "RUNNING" and app["user"] == getpass.getuser(), app
        assert app["runningContainers"] >= 1, app
        # Not taken: released after RELEASE_S, its application ended, no container held.
        released = server.warm("released", timeout_s=RELEASE_S + 60)
        assert released["kernel_id"] is None and released["app_id"] is None
        ended = _ended(hdfs_cluster, unused["app_id"])
        assert ended["state"] in ("FINISHED", "KILLED"), ended
        assert ended["runningContainers"] in (0, -1), ended  # nothing held for an idle student

        # The student is back (a kernel starts): the next warm kernel, which a notebook takes
        # with its running application and the server's settings.
        server.kernel(name="scalelab-pytorch").stop_channels()
        warm = server.warm("ready", timeout_s=300)
        assert warm["app_id"] != unused["app_id"]
        client = server.kernel(notebook="lab1.ipynb")
        took = result(
            client,
            "import json\njson.dumps([spark.sparkContext.applicationId, "
            "spark.sparkContext.master, spark.range(3).count(), "
            "spark.conf.get('spark.executor.memory')])",
        )
        assert took == [warm["app_id"], "yarn", 3, YARN_SPARK_CONF["spark.executor.memory"]]
        assert server.get("/scalelab/api/spark-warm")["taken"] == 1
    finally:
        if client is not None:
            client.stop_channels()
        server.stop()
    # The server's end ends the student's application too.
    assert _ended(hdfs_cluster, warm["app_id"])["state"] in ("FINISHED", "KILLED")
