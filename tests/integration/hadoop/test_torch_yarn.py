"""Data-parallel PyTorch on YARN, from the PySpark kernel (issue 15): pyspark's TorchDistributor
on the test cluster's ResourceManager and two NodeManagers (``tests/support/hadoopcluster.py``).

The kernel's ``spark`` runs on YARN with ScaleLab's settings only (as in
``tests/integration/hadoop/test_spark_yarn.py``), its executors sized for a rank: 512 MiB of heap
and 2944 MiB of
overhead, a 3,456 MiB container (the executor's JVM, torchrun and the rank, the last two each
importing torch, under YARN's physical-memory check), the largest beside a 640 MiB application
master (256 MiB of heap) in a NodeManager's 4 GiB. Two ranks, one in each executor's
container, train over gloo on the student's shards (every sample once per epoch across the
ranks) and say which YARN container they ran in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.hadoop.test_spark_yarn import yarn_kernel_environment
from tests.integration.spark.test_torch_distributor import SHARDS, TRAIN
from tests.support.hadoopcluster import HadoopTestCluster
from tests.support.kernelrun import Kernel, folded_traces

#: Executors sized for a PyTorch rank: 3,456 MiB containers (3 GiB ones measured 2.9-3.1 GB by
#: YARN's count on a busy host, and were killed in two whole-suite runs of 2026-12-07, twice in a
#: row in one), and a smaller application master, so that one fits beside a rank in a 4 GiB
#: NodeManager.
RANK_EXECUTORS = {
    "spark.executor.memory": "512m",
    "spark.executor.memoryOverhead": "2944m",
    "spark.yarn.am.memory": "256m",
}

#: One epoch on YARN; each rank's container (``TRAIN`` gathers ``CONTAINER_ID``, set by the
#: NodeManager) and the ids each rank saw.
ONE_EPOCH = """
epoch = run(1)
print(json.dumps({"containers": epoch["containers"], "epoch": epoch["seen"][0]}))
"""


@pytest.fixture(scope="module")
def rank_kernel(
    hdfs_cluster: HadoopTestCluster,
    kernels_dir: Path,
    course_store: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Kernel]:
    """A PySpark kernel on the test cluster's YARN with executors sized for a rank."""
    folder = tmp_path_factory.mktemp("torch-yarn")
    env = yarn_kernel_environment(hdfs_cluster, kernels_dir, course_store, folder / "logs")
    conf = json.loads(env["SCALELAB_SPARK_CONF"])
    env["SCALELAB_SPARK_CONF"] = json.dumps({**conf, **RANK_EXECUTORS})
    with Kernel("scalelab-pyspark", env, cwd=str(folder)) as kernel:
        yield kernel


def failure(out: dict) -> str:
    """A failed cell's whole story: its output, then the explanation and Spark's reason, which
    sit at the end of a long Java trace (pytest's own repr of ``out`` cuts both off)."""
    traces = [block["text/plain"] for block in folded_traces(out)]  # an explained error's
    return "\n".join([out["stdout"][-3000:], out["stderr"][-3000:], *out["traceback"], *traces])[
        -12000:
    ]


#: ScaleLab's explanation of a container YARN killed for its memory.
YARN_MEMORY_KILL = "YARN killed a Spark executor's container for using more memory"


def test_two_ranks_train_in_two_yarn_containers_on_disjoint_shards(rank_kernel: Kernel):
    shards = rank_kernel.run(SHARDS, timeout_s=300)
    assert shards["error"] is None, shards
    rows, _features = eval(shards["result"])
    assert rank_kernel.run("import json\n" + TRAIN)["error"] is None
    out = rank_kernel.run(ONE_EPOCH, timeout_s=600)
    if out["error"] is not None and YARN_MEMORY_KILL in out["stderr"]:
        # A rank's container (the executor's JVM, torchrun and the rank, both importing torch)
        # measured 2.9-3.1 GB by YARN's smaps count on a busy host, and 3 GiB containers were
        # killed (RANK_EXECUTORS). Spark replaces the executor; one more epoch, and the kill is
        # shown (the container size is bound by the test cluster's 4 GiB NodeManagers).
        print(f"YARN killed a rank's container once; again:\n{failure(out)[-3000:]}")
        out = rank_kernel.run(ONE_EPOCH, timeout_s=600)
    assert out["error"] is None, failure(out)
    result = json.loads(out["stdout"].strip().splitlines()[-1])
    containers = result["containers"]
    assert len(set(containers)) == 2, containers  # one rank in each executor's container
    assert all(c.startswith("container_") for c in containers), containers
    ranks = [set(ids) for ids in result["epoch"]]
    assert all(ranks) and not ranks[0] & ranks[1]  # both ranks worked, on disjoint rows
    assert sorted(result["epoch"][0] + result["epoch"][1]) == list(range(rows))
    master = rank_kernel.run("spark.sparkContext.master")
    assert master["result"] == "'yarn'"
