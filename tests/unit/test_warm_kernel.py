"""The warm PySpark kernel: the parts that need no running server or kernel. The rest runs for
real in ``tests/integration/spark/test_spark_warm.py``.
"""

from __future__ import annotations

import os

from scalelab.hub_ext.server.warm_kernel import (
    environment_difference,
    is_local,
    off_reason,
    session_code,
)


def test_a_server_without_spark_keeps_no_warm_kernel_and_a_cluster_master_one_unless_off():
    assert off_reason({}, True, True).startswith("no Spark configured")
    master = {"SCALELAB_SPARK_MASTER": "yarn"}
    assert off_reason(master, True, True) is None  # issue 34, Must 1: released when unused
    assert off_reason(master, True, True, on_cluster=True) is None
    assert "warm_on_cluster is off" in off_reason(master, True, True, on_cluster=False)
    local = {"SCALELAB_SPARK_MASTER": "local[2]"}
    assert off_reason(local, True, True, on_cluster=False) is None
    assert "not offered" in off_reason(local, True, False)
    assert off_reason(local, False, True) == "off (c.WarmKernelManager.warm_pyspark = False)"
    assert off_reason(local, True, True) is None


def test_only_local_masters_run_everything_in_the_driver():
    assert is_local("local") and is_local("local[2]") and is_local("local[*]")
    for master in (
        "yarn",
        "spark://127.0.0.1:7077",
        "k8s://https://api:6443",
        "local-cluster[2,1,1024]",
    ):
        assert not is_local(master), master


def test_a_request_of_another_environment_is_told_which_variables_differ_never_values():
    started = {"SCALELAB_STORE_URL": "file:///srv/course", "SECRET": "s3cr3t"}
    session = {**started, "JPY_SESSION_NAME": "/home/a/lab1.ipynb"}
    assert environment_difference(started, session) is None  # per kernel: set at hand-over
    other = {**started, "SECRET": "other", "EXTRA": "1"}
    why = environment_difference(started, other)
    assert why == "another environment (EXTRA, SECRET)" and "s3cr3t" not in why
    many = {f"V{i}": "x" for i in range(7)}
    assert environment_difference({}, many) == (
        "another environment (V0, V1, V2, V3, V4 and 2 more)"
    )


def test_the_hand_over_sets_the_notebooks_path_as_ipykernel_does_at_its_start():
    namespace: dict = {}
    path = "/home/a/it's here.ipynb"  # quoted safely
    before = os.environ.get("JPY_SESSION_NAME")
    try:
        exec(session_code(path), namespace)
        assert namespace["__session__"] == path
        assert os.environ["JPY_SESSION_NAME"] == path
        assert "_scalelab_os" not in namespace  # nothing else left in the notebook's names
    finally:
        if before is None:
            os.environ.pop("JPY_SESSION_NAME", None)
        else:
            os.environ["JPY_SESSION_NAME"] = before
