"""``scalelab doctor``'s cluster checks: the parts that need no running hub, kernel or cluster. The
rest runs for real in ``tests/integration/hadoop/test_doctor_hadoop.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from scalelab.commands.doctor_hadoop import (
    check_namenode,
    check_resourcemanager,
    check_ticket,
    hadoop_checks,
    namenode_http_addresses,
)
from scalelab.commands.doctor_report import FAIL
from scalelab.common.ports import free_port
from scalelab.kernels.spark_yarn import resourcemanager_web_address
from scalelab.store.access.hdfs import resolve_hdfs

HA_CONF = {
    "dfs.nameservices": "course",
    "dfs.ha.namenodes.course": "nn1,nn2",
    "dfs.namenode.rpc-address.course.nn1": "127.0.0.1:{nn1}",
    "dfs.namenode.rpc-address.course.nn2": "127.0.0.1:{nn2}",
    "dfs.namenode.http-address.course.nn1": "127.0.0.1:9871",
    "dfs.namenode.http-address.course.nn2": "127.0.0.1:9872",
}


def _ha_conf(nn1: int, nn2: int) -> dict[str, str]:
    return {k: v.format(nn1=nn1, nn2=nn2) for k, v in HA_CONF.items()}


def test_the_webhdfs_addresses_follow_the_nameservice_or_the_single_namenode():
    conf = _ha_conf(8020, 8021)
    target = resolve_hdfs("hdfs://course/data", conf)
    assert namenode_http_addresses(target, conf) == ["127.0.0.1:9871", "127.0.0.1:9872"]
    single = {"dfs.namenode.http-address": "nn.example:9870"}
    assert namenode_http_addresses(resolve_hdfs("hdfs://nn.example:8020/", single), single) == [
        "nn.example:9870"
    ]
    assert namenode_http_addresses(resolve_hdfs("hdfs://nn.example:8020/", {}), {}) == []


def test_the_resourcemanager_address_is_its_webapp_address_or_its_host_on_8088():
    assert resourcemanager_web_address({"yarn.resourcemanager.webapp.address": "rm:8089"}) == (
        "rm:8089"
    )
    assert resourcemanager_web_address({"yarn.resourcemanager.hostname": "rm"}) == "rm:8088"
    # yarn-default.xml's form refers to the hostname: take the host then.
    conf = {
        "yarn.resourcemanager.webapp.address": "${yarn.resourcemanager.hostname}:8088",
        "yarn.resourcemanager.hostname": "rm",
    }
    assert resourcemanager_web_address(conf) == "rm:8088"
    assert resourcemanager_web_address({}) is None


def test_a_hub_off_the_cluster_gets_no_cluster_check(tmp_path: Path):
    assert hadoop_checks("file:///srv/course", {}, "local[*]", {}) == []
    assert hadoop_checks("s3://course", {}, "local[2]", {"HADOOP_CONF_DIR": str(tmp_path)}) == []


def test_a_namenode_that_does_not_answer_fails_naming_the_address_and_the_fix():
    port = free_port()  # nothing listens there
    conf = {"dfs.namenode.http-address": f"127.0.0.1:{free_port()}"}
    check = check_namenode(f"hdfs://127.0.0.1:{port}/course", {}, conf, {}, timeout_s=2)
    assert check.status == FAIL
    assert f"RPC 127.0.0.1:{port} (Connection refused)" in check.detail
    assert "WebHDFS 127.0.0.1:" in check.detail and "connection refused" in check.detail
    assert "hdfs --daemon start namenode" in check.fix
    assert "dfs.namenode.rpc-address" in check.fix


def test_a_bad_hdfs_configuration_fails_with_the_property_named():
    conf = {"dfs.nameservices": "course"}
    check = check_namenode("hdfs://course/data", {}, conf, {}, timeout_s=1)
    assert check.status == FAIL
    assert "dfs.ha.namenodes.course" in check.detail


def test_yarn_without_a_configuration_fails_naming_yarn_site():
    check = check_resourcemanager({}, None)
    assert check.status == FAIL
    assert "no HADOOP_CONF_DIR or YARN_CONF_DIR" in check.detail
    assert "yarn.resourcemanager.hostname" in check.fix
    [only] = hadoop_checks("file:///srv/course", {}, "yarn", {})
    assert only.name == "YARN ResourceManager" and only.status == FAIL


def test_a_resourcemanager_that_does_not_answer_fails_with_the_curl_to_try(tmp_path: Path):
    port = free_port()
    conf = {"yarn.resourcemanager.webapp.address": f"127.0.0.1:{port}"}
    check = check_resourcemanager(conf, str(tmp_path), timeout_s=2)
    assert check.status == FAIL
    assert check.detail == f"127.0.0.1:{port} does not answer: connection refused"
    assert f"curl http://127.0.0.1:{port}/ws/v1/cluster/info" in check.fix
    assert f"{tmp_path}/yarn-site.xml" in check.fix


def test_a_kerberos_cluster_without_klist_fails_naming_the_package(tmp_path: Path):
    check = check_ticket({"PATH": str(tmp_path)})
    assert check.status == FAIL
    assert "krb5-user" in check.fix


@pytest.mark.skipif(shutil.which("klist") is None, reason="no klist (krb5-user) here")
def test_no_ticket_fails_naming_the_cache_and_kinit(tmp_path: Path):
    cache = tmp_path / "krb5cc_none"
    env = {**os.environ, "KRB5CCNAME": f"FILE:{cache}"}
    check = check_ticket(env)
    assert check.status == FAIL
    assert check.detail == f"no Kerberos ticket in {cache}"
    assert "kinit -kt <keytab> <principal>" in check.fix


def test_the_spawners_hadoop_conf_dir_is_the_clusters_environment():
    from scalelab.commands.doctor import DoctorSettings, cluster_env

    s = DoctorSettings(
        state_dir="/s", ip="127.0.0.1", port=8000, store_url="file:///s", store_options={},
        home_root="", spark_master="yarn", db_url="", declared_gpus=[], exclude_gpus=[],
        hadoop_conf_dir="/etc/hadoop/conf",
    )  # fmt: skip
    env = cluster_env({"HADOOP_CONF_DIR": "/elsewhere", "PATH": "/bin"}, s)
    assert env == {
        "HADOOP_CONF_DIR": "/etc/hadoop/conf",
        "YARN_CONF_DIR": "/etc/hadoop/conf",
        "PATH": "/bin",
    }
    unset = DoctorSettings(**{**s.__dict__, "hadoop_conf_dir": ""})
    elsewhere = {"HADOOP_CONF_DIR": "/elsewhere"}
    assert cluster_env(elsewhere, unset) == elsewhere
