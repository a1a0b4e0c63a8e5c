"""Spark on YARN from the PySpark kernel, on the test cluster's real YARN and HDFS (one JVM: a
ResourceManager and 2 NodeManagers whose containers are real processes, 4 GiB each, the
physical-memory check on; ``hdfs_cluster`` in ``tests/conftest.py``).

The kernel is configured as a student's server gets it from the hub, through ScaleLab's own
settings only (``spark_master = "yarn"``, ``hadoop_conf_dir``, ``spark_conf``, turned into the
server's environment by :func:`scalelab.spawner.environment.server_environment`): executors run
in YARN containers, Spark's jars and PySpark are not uploaded, a job reads and writes Parquet in
HDFS, an executor that YARN kills for memory is explained under the cell, and the containers'
logs reach the server's log view. Lab 1's cross-validation on YARN, from a student's server under
a real hub: ``tests/integration/hadoop/test_hub_on_hdfs.py``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalelab.hub_ext.server.logstream import list_logs
from tests.support.hadoopcluster import HadoopTestCluster, yarn_server_environment
from tests.support.kernelrun import Kernel

#: A Python worker's allocation well past its executor's 896 MiB container.
HOG_MIB = 1400


def yarn_environment(
    kernel_environment: dict[str, str], cluster: HadoopTestCluster, log_dir: Path
) -> dict[str, str]:
    """The kernel's environment as ScaleLab's spawner makes it for ``spark_master = "yarn"``
    (and the course store of ``kernel_environment``), without pytest's ``PYTEST_CURRENT_TEST``
    (with it ipykernel would keep the JVM's own output out of the cells)."""
    env = {k: v for k, v in kernel_environment.items() if k != "PYTEST_CURRENT_TEST"}
    env.update(yarn_server_environment(cluster))
    env["SCALELAB_LOG_DIR"] = str(log_dir)
    return env


def yarn_kernel_environment(
    cluster: HadoopTestCluster, kernels_dir: Path, course_store: str, log_dir: Path
) -> dict[str, str]:
    """:func:`yarn_environment` for a module-scoped kernel (no ``kernel_environment`` fixture
    there): the course store, no GPU."""
    base = {
        **os.environ,
        "JUPYTER_PATH": str(kernels_dir),
        "SCALELAB_STORE_URL": course_store,
        "SCALELAB_STORE_OPTIONS": "{}",
        "SCALELAB_GPUS": "",
        "CUDA_VISIBLE_DEVICES": "",
    }
    return yarn_environment(base, cluster, log_dir)


def test_the_cluster_has_a_resourcemanager_and_two_nodemanagers(hdfs_cluster: HadoopTestCluster):
    assert hdfs_cluster.yarn is not None
    nodes = hdfs_cluster.resourcemanager("nodes")["nodes"]["node"]
    assert [node["state"] for node in nodes] == ["RUNNING", "RUNNING"]
    assert {node["totalResource"]["memory"] for node in nodes} == {4096}
    assert {node["totalResource"]["vCores"] for node in nodes} == {2}
    site = (hdfs_cluster.conf_dir / "yarn-site.xml").read_text()
    assert f"<value>{hdfs_cluster.yarn['resourcemanager']}</value>" in site
    assert re.fullmatch(r"127\.0\.0\.1:\d+", hdfs_cluster.yarn["resourcemanager"])
    scheduler = hdfs_cluster.resourcemanager("scheduler")["scheduler"]["schedulerInfo"]
    assert scheduler["type"] == "capacityScheduler"


@pytest.fixture(scope="module")
def yarn_kernel(
    hdfs_cluster: HadoopTestCluster,
    kernels_dir: Path,
    course_store: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Kernel]:
    """A PySpark kernel whose ``spark`` runs on the test cluster's YARN, its session started
    (shared by this module's tests: a session on YARN takes about 30 s to start here)."""
    folder = tmp_path_factory.mktemp("yarn-kernel")
    env = yarn_kernel_environment(hdfs_cluster, kernels_dir, course_store, folder / "logs")
    with Kernel("scalelab-pyspark", env, cwd=str(folder)) as kernel:
        started = kernel.run("spark.sparkContext.master, spark.sparkContext.applicationId", 300)
        assert started["error"] is None, started
        yield kernel


def test_a_job_runs_in_two_executor_containers_and_reads_and_writes_parquet_in_hdfs(
    yarn_kernel: Kernel, hdfs_cluster: HadoopTestCluster
):
    url = hdfs_cluster.url(f"/user/{hdfs_cluster.superuser}/yarn-test/numbers")
    out = yarn_kernel.run(
        "import os\n"
        "numbers = spark.range(0, 10000, numPartitions=4).selectExpr('id', 'id % 7 AS k')\n"
        f"numbers.write.mode('overwrite').parquet({url!r})\n"
        f"back = spark.read.parquet({url!r})\n"
        "containers = sorted(set(sc.parallelize(range(8), 8)"
        ".map(lambda _: os.environ.get('CONTAINER_ID', '')).collect()))\n"
        "(sc.master, sc.applicationId, back.count(), back.groupBy('k').count().count(), "
        "containers)",
        timeout_s=300,
    )
    assert out["error"] is None, out
    master, application, rows, groups, containers = eval(out["result"])
    assert (master, rows, groups) == ("yarn", 10000, 7)
    # The executors' Python workers ran in two YARN containers of this application.
    number = application.removeprefix("application_")
    assert len(containers) == 2, containers
    assert all(c.startswith(f"container_{number}_") for c in containers), containers
    # The ResourceManager runs it: the application master and the two executors.
    app = hdfs_cluster.resourcemanager(f"apps/{application}")["app"]
    assert (app["state"], app["runningContainers"]) == ("RUNNING", 3)
    # Spark's jars and PySpark were not uploaded: the staging folder holds Spark's
    # configuration only (spark.yarn.jars and PYSPARK_ARCHIVES_PATH are local: URIs).
    staging = f"/user/{hdfs_cluster.superuser}/.sparkStaging/{application}"
    names = [p.rsplit("/", 1)[-1] for p in hdfs_cluster.webhdfs().ls(staging, detail=False)]
    assert names == ["__spark_conf__.zip"], names
    # The files in HDFS are Parquet shards written by the executors.
    written = hdfs_cluster.webhdfs().ls(url.split(str(hdfs_cluster.rpc_port), 1)[1], detail=False)
    assert any(p.endswith(".parquet") for p in written), written


def test_the_executors_logs_reach_the_servers_log_view_while_the_application_runs(
    yarn_kernel: Kernel,
):
    out = yarn_kernel.run(
        "import sys\n"
        "sc.parallelize(range(2), 2).foreach("
        "lambda i: print(f'scalelab-executor-says-{i}', file=sys.stderr, flush=True))"
    )
    assert out["error"] is None, out
    folder = Path(yarn_kernel.env["SCALELAB_LOG_DIR"])
    deadline = time.monotonic() + 60
    said = ""
    while time.monotonic() < deadline and not {"-0", "-1"} <= set(re.findall(r"-\d", said)):
        time.sleep(1)
        said = "".join(
            line
            for copy in folder.glob("yarn-container_*-stderr.log")
            for line in copy.read_text(errors="replace").splitlines(keepends=True)
            if "scalelab-executor-says-" in line
        )
    assert "scalelab-executor-says-0" in said and "scalelab-executor-says-1" in said, said
    # The copies are logs the server's log view lists and follows, beside the driver's.
    names = [log["name"] for log in list_logs(folder)]
    assert any(n.startswith("spark-driver-") for n in names), names
    assert sum(n.startswith("yarn-container_") for n in names) >= 2, names


#: The cell of the lesson: a Python function in an executor that holds far more memory than the
#: executor's container was given.
HOG_CELL = f"""
def hog(rows):
    import time
    import sys
    print("scalelab-hog-starts", file=sys.stderr, flush=True)
    block = bytearray(b"x") * ({HOG_MIB} * 2**20)  # every page touched: resident
    time.sleep(600)  # held until YARN's NodeManager measures and kills the container
    yield len(block)

sc.parallelize([0], 1).mapPartitions(hog).collect()
"""


def test_an_executor_killed_by_yarn_for_memory_is_explained_with_the_settings_that_fix_it(
    yarn_kernel: Kernel, tmp_path: Path
):
    out = yarn_kernel.run(HOG_CELL, timeout_s=300)  # the hog sleeps 600 s: a kill ends it
    assert out["error"] is not None, out
    message = out["error"][1]
    # YARN killed the container for physical memory; Spark reports it as the executor's loss.
    assert "physical memory" in message, message
    # The explanation comes first, under the cell, naming the executor's settings.
    kinds = [kind for kind, _text in out["order"]]
    assert kinds.index("stderr") < kinds.index("error"), kinds
    explanation = out["stderr"]
    # First: the scheduler's own lines about the lost executor go to the driver's log only.
    assert explanation.startswith("ScaleLab: "), explanation
    assert "YARN" in explanation and "container" in explanation
    settings = explanation.split("Setting to change:", 1)[1].splitlines()[0]
    for setting in ("spark.executor.memoryOverhead", "spark.memory.offHeap", "spark.executor"):
        assert setting in settings, settings
    assert settings.strip().endswith("spark.executor.memory"), settings
    assert "spark.driver.memory" not in settings  # the driver's heap is not the problem
    assert "896" in explanation  # the container's size, 512 MiB heap + 384 MiB overhead
    (tmp_path / "yarn-killed-message.txt").write_text(message)  # kept for a failed run's eyes
    # The killed executor's copy of its log goes on to its last lines, written as YARN killed
    # it (its JVM's SIGTERM), after the mirror's last look at the running container.
    folder = Path(yarn_kernel.env["SCALELAB_LOG_DIR"])
    deadline, tail = time.monotonic() + 30, ""
    while "RECEIVED SIGNAL TERM" not in tail and time.monotonic() < deadline:
        time.sleep(1)
        copies = [p.read_text(errors="replace") for p in folder.glob("yarn-container_*.log")]
        hog = [text for text in copies if "scalelab-hog-starts" in text]
        tail = hog[0].split("scalelab-hog-starts", 1)[1] if hog else ""
    assert "RECEIVED SIGNAL TERM" in tail, tail[-2000:]
    # The driver lives on: only the executor's container was killed.
    again = yarn_kernel.run("spark.range(100).count()", timeout_s=240)
    assert again["result"] == "100", again
