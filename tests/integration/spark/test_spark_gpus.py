"""GPUs for Spark from the student's allocation (issue 15): the server's GPUs, and only those,
declared to Spark's resource scheduling in local mode with a discovery script.

The integration test's GPUs are declared, not real (no GPU on these machines): two UUIDs in the
server's ``SCALELAB_GPUS`` and ``CUDA_VISIBLE_DEVICES``, as ScaleLab's spawner sets them;
Spark and ``TorchDistributor`` hand them out without touching a device.

The parts that need no running service: ``tests/unit/test_spark_gpus.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.kernelrun import Kernel
from tests.unit.test_spark_gpus import DECLARED

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
