"""The course store on an HA pair of namenodes: the test cluster with ``--ha`` (its own JVM,
started for this module), the store URL naming the nameservice as a course cluster's does.

``HADOOP_CONF_DIR`` (written by the cluster) resolves ``hdfs://scalelab-ns/...`` to both
namenodes; hdfs-native follows the active one, through a failover in the middle of a read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalelab.store import check_store, open_store
from scalelab.store.access.hdfs import read_hadoop_conf, resolve_hdfs
from tests.support.hadoopcluster import HadoopTestCluster, running_cluster

NAMESERVICE = "scalelab-ns"


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HadoopTestCluster]:
    """The HA pair (nn1 active, nn2 standby), its own JVM for this module."""
    yield from running_cluster(tmp_path_factory.mktemp("hdfs-ha"), nameservice=NAMESERVICE)


@pytest.fixture
def conf_env(ha_cluster: HadoopTestCluster, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``HADOOP_CONF_DIR`` of the HA pair; the superuser as the client."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(ha_cluster.conf_dir))
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    return ha_cluster.conf_dir


def test_the_nameservice_resolves_to_both_namenodes_and_serves_the_store(
    ha_cluster: HadoopTestCluster, conf_env: Path
):
    conf = read_hadoop_conf(conf_env)
    assert conf["fs.defaultFS"] == f"hdfs://{NAMESERVICE}"
    target = resolve_hdfs(f"hdfs://{NAMESERVICE}/course", conf)
    assert target.nameservice == NAMESERVICE
    assert target.namenodes == tuple(("127.0.0.1", nn["rpc_port"]) for nn in ha_cluster.namenodes)
    assert len(target.namenodes) == 2
    for url in (f"hdfs://{NAMESERVICE}/course-ha", "hdfs:///course-ha"):  # named, or the default
        check_store(url, {})
        store = open_store(url)
        store.pipe_file("home/ops/hello.txt", b"through the nameservice")
        assert store.cat_file("home/ops/hello.txt") == b"through the nameservice"
        store.rm("home/ops/hello.txt")
    assert ha_cluster.webhdfs().ls("/course-ha/home/ops", detail=False) == []


def test_a_read_goes_on_through_a_failover_and_the_store_follows_the_active_namenode(
    ha_cluster: HadoopTestCluster, conf_env: Path
):
    store = open_store(f"hdfs://{NAMESERVICE}/course-failover")
    payload = os.urandom(8 * 1024 * 1024)
    store.pipe_file("datasets/big.bin", payload)
    with store.open("datasets/big.bin", "rb") as f:
        head = f.read(1024 * 1024)
        active = ha_cluster.failover()
        rest = f.read()
    assert active == "nn2"
    assert head + rest == payload
    # The same store, and a new one, reach the namenode that is active now.
    store.pipe_file("datasets/after.txt", b"written after the failover")
    assert store.ls("datasets", detail=False) == ["datasets/after.txt", "datasets/big.bin"]
    fresh = open_store(f"hdfs://{NAMESERVICE}/course-failover")
    assert fresh.cat_file("datasets/after.txt") == b"written after the failover"
    assert ha_cluster.failover() == "nn1"  # and back
    assert fresh.cat_file("datasets/big.bin") == payload
