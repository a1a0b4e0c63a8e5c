"""Spark reading and writing the course store, through the PySpark kernel, in local mode and on a
real Spark standalone cluster (master and worker started from pyspark's ``spark-class`` on
loopback by ``tests/support/sparkcluster.py``, torn down after)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scalelab.store import open_store
from tests.support.kernelrun import Kernel
from tests.support.sparkcluster import standalone_cluster as spark_standalone

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


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """A real Spark standalone master and one worker (1 core, 1 GiB) on loopback."""
    with spark_standalone(tmp_path / "cluster") as master:
        yield master


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
