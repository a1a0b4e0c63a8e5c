"""The warm Spark driver: the parts that need no running hub, kernel or cluster. The rest runs for
real in ``tests/integration/spark/test_spark_warm.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scalelab.hub_ext.server.spark_warm import off_reason
from scalelab.kernels import spark_warm


def test_a_server_without_spark_or_with_a_cluster_master_keeps_no_warm_driver():
    assert off_reason({}, True, True).startswith("no Spark configured")
    master = {"SCALELAB_SPARK_MASTER": "yarn"}
    assert "only a local master" in off_reason(master, True, True)
    local = {"SCALELAB_SPARK_MASTER": "local[2]"}
    assert "not offered" in off_reason(local, True, False)
    assert "enabled = False" in off_reason(local, False, True)
    assert off_reason(local, True, True) is None


def test_a_kernel_of_another_folder_or_environment_is_told_what_differs(tmp_path: Path):
    env = {"SCALELAB_STORE_URL": "file:///srv/course", "SECRET": "s3cr3t", "JPY_PARENT_PID": "1"}
    offered = spark_warm.identity(str(tmp_path), env)
    kernel_env = {**env, "JPY_PARENT_PID": "2", "PYSPARK_PYTHON": sys.executable}
    assert spark_warm.difference(offered, spark_warm.identity(str(tmp_path), kernel_env)) is None
    other = {**env, "SCALELAB_STORE_URL": "file:///srv/other"}
    why = spark_warm.difference(offered, spark_warm.identity(str(tmp_path), other))
    assert why == "another environment (SCALELAB_STORE_URL)"
    assert "s3cr3t" not in json.dumps(offered)  # digests only, never values
    (tmp_path / "lab1").mkdir()
    why = spark_warm.difference(offered, spark_warm.identity(str(tmp_path / "lab1"), env))
    assert why.startswith("another working folder")
