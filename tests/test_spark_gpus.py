"""GPUs for Spark from the student's allocation (issue 15): the server's GPUs, and only those,
declared to Spark's resource scheduling in local mode with a discovery script.

The integration test's GPUs are declared, not real (no GPU on these machines): two UUIDs in the
server's ``SCALELAB_GPUS`` and ``CUDA_VISIBLE_DEVICES``, as ScaleLab's spawner sets them;
Spark and ``TorchDistributor`` hand them out without touching a device.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from scalelab.kernels.spark_gpus import (
    discovery_output,
    gpu_conf,
    granted_gpus,
    write_discovery_script,
)
from scalelab.kernels.spark_session import session_conf
from tests.kernelrun import Kernel

DECLARED = "GPU-11111111-aaaa-bbbb-cccc-000000000001,GPU-11111111-aaaa-bbbb-cccc-000000000002"


def test_the_servers_gpus_are_its_allocation():
    assert granted_gpus({"SCALELAB_GPUS": "GPU-a,GPU-b", "CUDA_VISIBLE_DEVICES": "0"}) == [
        "GPU-a",
        "GPU-b",
    ]
    assert granted_gpus({"CUDA_VISIBLE_DEVICES": "GPU-c"}) == ["GPU-c"]
    for none in ("", "-1", "none", "void", " , "):
        assert granted_gpus({"SCALELAB_GPUS": none}) == []
    assert granted_gpus({}) == []


def test_local_mode_declares_them_and_a_cluster_master_does_not():
    conf = gpu_conf(["GPU-a", "GPU-b"], "local[*]", "/s.sh")
    assert conf == {
        "spark.driver.resource.gpu.amount": "2",
        "spark.driver.resource.gpu.discoveryScript": "/s.sh",
    }
    assert gpu_conf([], "local[*]", "/s.sh") == {}
    assert gpu_conf(["GPU-a"], "spark://m:7077", "/s.sh") == {}
    assert gpu_conf(["GPU-a"], "yarn", "/s.sh") == {}


def test_the_discovery_script_answers_spark_with_indices_into_the_visible_devices(
    tmp_path: Path,
):
    script = write_discovery_script(tmp_path, 3)
    assert script.stat().st_mode & 0o777 == 0o700
    printed = subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout
    assert json.loads(printed) == {"name": "gpu", "addresses": ["0", "1", "2"]}
    assert json.loads(discovery_output(1)) == {"name": "gpu", "addresses": ["0"]}


def test_the_kernels_session_gets_the_servers_gpus_in_local_mode_only(tmp_path: Path):
    env = {"SCALELAB_GPUS": DECLARED, "CUDA_VISIBLE_DEVICES": DECLARED}
    conf = session_conf(env, tmp_path / "logs")
    assert conf["spark.driver.resource.gpu.amount"] == "2"
    script = Path(conf["spark.driver.resource.gpu.discoveryScript"])
    assert script.parent == tmp_path / "logs" and script.name.startswith(".")  # not a log
    cluster = session_conf({**env, "SCALELAB_SPARK_MASTER": "spark://m:7077"}, tmp_path / "c")
    assert not any("resource.gpu" in key for key in cluster)
    assert not any("resource.gpu" in key for key in session_conf({}, tmp_path / "cpu"))
    ops = json.dumps({"spark.driver.resource.gpu.amount": "1"})  # ops' setting wins
    assert (
        session_conf({**env, "SCALELAB_SPARK_CONF": ops}, None)["spark.driver.resource.gpu.amount"]
        == "1"
    )


#: In the kernel: what Spark holds, what TorchDistributor makes of it, and what each of its
#: local ranks sees (without touching a device: there is none here).
GPU_CELL = """
import json, os
from pyspark.ml.torch.distributor import TorchDistributor, _get_gpus_owned

def ranks_view():
    import os
    import torch.distributed as dist
    dist.init_process_group("gloo")
    seen = [None] * dist.get_world_size()
    dist.all_gather_object(seen, (os.environ["LOCAL_RANK"], os.environ["CUDA_VISIBLE_DEVICES"]))
    dist.destroy_process_group()
    return seen

print(json.dumps({
    "addresses": sc.resources["gpu"].addresses,
    "owned": _get_gpus_owned(spark),
    "ranks": TorchDistributor(num_processes=2, local_mode=True, use_gpu=True).run(ranks_view),
}))
"""


@pytest.mark.integration
def test_torch_distributor_hands_each_local_rank_the_servers_gpus_only(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = {
        **kernel_environment,
        "SCALELAB_GPUS": DECLARED,
        "CUDA_VISIBLE_DEVICES": DECLARED,
        "SCALELAB_LOG_DIR": str(tmp_path / "logs"),
    }
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run(GPU_CELL, timeout_s=600)
    assert out["error"] is None, out
    result = json.loads(out["stdout"].strip().splitlines()[-1])
    assert result["addresses"] == ["0", "1"]
    assert result["owned"] == DECLARED.split(",")  # by UUID: the student's, none other
    ranks = {rank: visible for rank, visible in result["ranks"]}
    assert set(ranks) == {"0", "1"}
    # torchrun's local ranks see the student's GPUs (TorchDistributor shuffles their order).
    for visible in ranks.values():
        assert sorted(visible.split(",")) == sorted(DECLARED.split(",")), ranks
