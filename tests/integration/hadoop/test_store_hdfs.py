"""HDFS stores with a real client and no test cluster: a real PySpark kernel whose store's
namenode is down, and an outside cluster when ``SCALELAB_TEST_NAMENODE`` names one.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from scalelab.common.ports import free_port
from scalelab.store import check_store, student_store


def test_a_real_kernel_with_a_down_namenode_starts_and_explains_at_first_use(
    kernel_environment: dict[str, str], tmp_path: Path
):
    from jupyter_client.manager import start_new_kernel

    env = {**kernel_environment, "SCALELAB_STORE_URL": f"hdfs://127.0.0.1:{free_port()}/c"}
    km, kc = start_new_kernel(kernel_name="scalelab-pytorch", env=env, cwd=str(tmp_path))
    try:
        outputs: list[str] = []

        def hook(msg: dict) -> None:
            content = msg["content"]
            outputs.append(content.get("text", "") + content.get("evalue", ""))

        reply = kc.execute_interactive("store.ls('datasets')", output_hook=hook, timeout=120)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "StoreUnavailableError"
        text = "".join(outputs)
        assert "nothing answers at 127.0.0.1" in text and "c.ScaleLabSpawner.store_url" in text
        reply = kc.execute_interactive("print(6 * 7)", output_hook=hook, timeout=60)
        assert reply["content"]["status"] == "ok" and km.is_alive()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


NAMENODE = os.environ.get("SCALELAB_TEST_NAMENODE", "")


@pytest.mark.skipif(
    not NAMENODE,
    reason="no outside HDFS cluster named: set SCALELAB_TEST_NAMENODE=hdfs://host:8020/path "
    "(a writable folder) to test against one (the test cluster's tests are "
    "tests/integration/hadoop/test_store_hdfs_cluster.py)",
)
def test_a_real_cluster_round_trip():
    user = f"scalelab-test-{secrets.token_hex(3)}"
    check_store(NAMENODE, {})
    store = student_store(user, NAMENODE)
    store.pipe_file(f"home/{user}/hello.txt", b"hello hdfs")
    try:
        assert store.cat_file(f"home/{user}/hello.txt") == b"hello hdfs"
        assert store.ls("home", detail=False) == [f"home/{user}"]
        with pytest.raises(PermissionError):
            store.pipe_file("datasets/planted.txt", b"x")
    finally:
        store.rm(f"home/{user}", recursive=True)
