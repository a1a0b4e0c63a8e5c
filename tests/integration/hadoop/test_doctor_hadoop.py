"""``scalelab doctor``'s cluster checks: the namenode (RPC and WebHDFS), the Kerberos ticket, the
ResourceManager. The unit tests point them at closed ports and hand-written configurations; the
``hadoop`` ones at the real test cluster (tests/support/hadoopcluster.py).

The parts that need no running service: ``tests/unit/test_doctor_hadoop.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalelab.commands.doctor_hadoop import (
    check_namenode,
    hadoop_checks,
)
from scalelab.commands.doctor_report import OK, WARN
from scalelab.common.ports import free_port
from tests.support.hadoopcluster import HadoopTestCluster
from tests.unit.test_doctor_hadoop import _ha_conf


@pytest.mark.parametrize("protocol", ["hdfs", "webhdfs"])
def test_a_running_namenode_passes_through_both_protocols(
    hdfs_cluster: HadoopTestCluster, protocol: str
):
    env = hdfs_cluster.environment()
    url = hdfs_cluster.url("/") if protocol == "hdfs" else hdfs_cluster.webhdfs_url("/")
    [check] = hadoop_checks(url, {}, "local[*]", env)
    assert check.status == OK, check
    rpc, http = (
        f"RPC 127.0.0.1:{hdfs_cluster.rpc_port}",
        f"WebHDFS 127.0.0.1:{hdfs_cluster.http_port}",
    )
    assert check.detail == f"{rpc}, {http} answer"


def test_an_ha_pair_with_one_namenode_down_is_a_warning(hdfs_cluster: HadoopTestCluster):
    """The live namenode of the test cluster as nn1, a closed port as nn2 (a configuration
    written here: one test cluster per run)."""
    conf = _ha_conf(hdfs_cluster.rpc_port, free_port())
    conf["dfs.namenode.http-address.course.nn1"] = f"127.0.0.1:{hdfs_cluster.http_port}"
    conf["dfs.namenode.http-address.course.nn2"] = f"127.0.0.1:{free_port()}"
    check = check_namenode("hdfs://course/", {}, conf, {}, timeout_s=2)
    assert check.status == WARN, check
    assert check.detail.startswith("RPC 127.0.0.1:")
    assert f"RPC 127.0.0.1:{hdfs_cluster.rpc_port}, WebHDFS" in check.detail  # the live one


def _doctor(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``python -m scalelab doctor --quick`` on a fresh state folder and a free port."""
    argv = [sys.executable, "-m", "scalelab", "doctor", "--quick"]
    return subprocess.run(
        [*argv, "--state-dir", str(tmp_path / "state"), "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


def test_scalelab_doctor_reports_the_namenode_of_an_hdfs_store(
    hdfs_cluster: HadoopTestCluster, tmp_path: Path
):
    store = hdfs_cluster.url("/")
    result = _doctor(tmp_path, {**os.environ, **hdfs_cluster.environment()}, "--store", store)
    out = result.stdout
    line = (
        f"[ ok ] HDFS namenode: RPC 127.0.0.1:{hdfs_cluster.rpc_port}, "
        f"WebHDFS 127.0.0.1:{hdfs_cluster.http_port} answer"
    )
    assert line in out, out + result.stderr
    assert f"Course store: {store} is reachable" in out


def test_scalelab_doctor_checks_yarn_through_the_spawners_hadoop_conf_dir(
    hdfs_cluster: HadoopTestCluster, tmp_path: Path
):
    """Ops' YARN config (spark_master and hadoop_conf_dir, no HADOOP_CONF_DIR in the doctor's
    own environment): the ResourceManager of the test cluster is checked and found."""
    assert hdfs_cluster.yarn is not None
    config = tmp_path / "hub.py"
    config.write_text(
        'c.ScaleLabSpawner.spark_master = "yarn"\n'
        f"c.ScaleLabSpawner.hadoop_conf_dir = {str(hdfs_cluster.conf_dir)!r}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
    result = _doctor(tmp_path, env, "--config", str(config))
    web = hdfs_cluster.yarn["webapp"]
    line = f"[ ok ] YARN ResourceManager: {web}: 2 NodeManager(s), 8192 MB and 4 vcores in all"
    assert line in result.stdout, result.stdout + result.stderr
