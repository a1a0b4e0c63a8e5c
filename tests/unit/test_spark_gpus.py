"""GPUs for Spark from the student's allocation (issue 15): the parts that need no running hub,
kernel or cluster. The rest runs for real in ``tests/integration/spark/test_spark_gpus.py``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from scalelab.kernels.spark_gpus import (
    discovery_output,
    gpu_conf,
    granted_gpus,
    write_discovery_script,
)
from scalelab.kernels.spark_session import session_conf

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
