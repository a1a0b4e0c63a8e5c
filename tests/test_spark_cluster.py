"""Spark reading and writing the course store, through the PySpark kernel, in local mode and on a
real Spark standalone cluster (master and worker started here from pyspark's ``spark-class`` on
loopback, torn down after)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

from scalelab.kernels.spark_session import free_port
from scalelab.store import open_store
from tests.kernelrun import Kernel

pytestmark = pytest.mark.integration

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
SONGS = "datasets/millionsong/parquet"

# Read the real Million Song shards, write a per-year summary into the student's home, read it
# back through fsspec's `store` and through Spark: both must name the same files.
ROUND_TRIP = """
from scalelab.store import store_url
songs = spark.read.parquet(store_url("datasets/millionsong/parquet"))
by_year = songs.groupBy("year").count()
by_year.write.mode("overwrite").parquet(store_url("home/tester/by_year"))
import pyarrow.parquet as pq
with store.open("home/tester/by_year/" + [p.rsplit("/", 1)[-1] for p in
        store.ls("home/tester/by_year", detail=False) if p.endswith(".parquet")][0]) as f:
    first_shard_rows = pq.read_table(f).num_rows
back = spark.read.parquet(store_url("home/tester/by_year"))
(songs.count(), back.count(), back.agg({"count": "sum"}).first()[0], first_shard_rows > 0)
"""


def _rows_in_store(course_store: str) -> int:
    fs = open_store(course_store)
    total = 0
    for path in fs.ls(SONGS, detail=False):
        if path.endswith(".parquet"):
            with fs.open(path) as f:
                total += pq.read_metadata(f).num_rows
    return total


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on {port}:\n{log.read_text()[-3000:]}")


def _wait_text(log: Path, text: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text():
            return
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared in {log}:\n{log.read_text()[-3000:]}")


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """A real Spark standalone master and one worker (1 core, 1 GiB) on loopback."""
    port, ui = free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "SPARK_NO_DAEMONIZE": "1",
    }
    procs: list[subprocess.Popen] = []
    logs = {name: tmp_path / f"{name}.log" for name in ("master", "worker")}
    try:
        with open(logs["master"], "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        str(SPARK_CLASS),
                        "org.apache.spark.deploy.master.Master",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--webui-port",
                        str(ui),
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        _wait_port(port, procs[0], logs["master"])
        with open(logs["worker"], "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        str(SPARK_CLASS),
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(free_port()),
                        f"spark://127.0.0.1:{port}",
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        _wait_text(logs["worker"], "Successfully registered with master")
        yield f"spark://127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_local_mode_reads_and_writes_the_store(
    kernel_environment: dict[str, str], course_store: str, tmp_path: Path
):
    expected = _rows_in_store(course_store)
    assert expected == 6724  # the course's Million Song subset
    env = {**kernel_environment, "SCALELAB_LOG_DIR": str(tmp_path / "logs")}
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run(ROUND_TRIP)
        assert out["error"] is None, out
        songs, years, summed, shard_read = eval(out["result"])  # a tuple of ints and a bool
        assert (songs, summed, shard_read) == (expected, expected, True)
        assert years > 50


def test_standalone_cluster_reads_and_writes_the_store(
    kernel_environment: dict[str, str], course_store: str, standalone_cluster: str, tmp_path: Path
):
    expected = _rows_in_store(course_store)
    env = {
        **kernel_environment,
        "SCALELAB_SPARK_MASTER": standalone_cluster,
        "SCALELAB_SPARK_DRIVER_MEMORY": "1g",
        "SPARK_LOCAL_IP": "127.0.0.1",  # the driver, reachable by the worker on loopback
        "SCALELAB_LOG_DIR": str(tmp_path / "logs"),
    }
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run(
            "spark.conf.set('spark.sql.shuffle.partitions', '4')\n"
            "spark.sparkContext.master, "
            "spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()",
            timeout_s=600,
        )
        assert out["error"] is None, out
        master, members = eval(out["result"])
        assert master == standalone_cluster
        # Executors register shortly after the session: wait for the worker's one.
        deadline = time.monotonic() + 180
        while members < 2 and time.monotonic() < deadline:
            time.sleep(2)
            members = int(
                kernel.run("spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()")[
                    "result"
                ]
            )
        assert members == 2  # the driver and the worker's executor
        out = kernel.run(ROUND_TRIP, timeout_s=600)
        assert out["error"] is None, out
        songs, _years, summed, shard_read = eval(out["result"])
        assert (songs, summed, shard_read) == (expected, expected, True)
        hosts = kernel.run(
            "sorted(set(spark.sparkContext.parallelize(range(4), 4)"
            ".map(lambda _: __import__('os').getpid()).collect()) - {__import__('os').getpid()})"
        )
        assert hosts["result"] not in (None, "[]")  # the work ran in the executor's Python
