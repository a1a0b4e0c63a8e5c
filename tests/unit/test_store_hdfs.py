"""HDFS stores without a namenode: Hadoop configuration (written by the test as a cluster would
have it), HA nameservices, Kerberos, the client choice; the hdfs-native client is real here,
against a closed port. The store on a real namenode and datanode (the HDFS test cluster,
``hadoop/testcluster``) is ``tests/integration/hadoop/test_store_hdfs_cluster.py``'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import requests

from scalelab.common.ports import free_port
from scalelab.store import StoreConfigError, StoreUnavailableError, check_store, student_store
from scalelab.store.access.hdfs import (
    MIT_DEFAULT_CACHE,
    HdfsTarget,
    check_kerberos,
    choose_client,
    hdfs_refusal,
    kerberos_required,
    open_hdfs,
    read_hadoop_conf,
    resolve_hdfs,
    ticket_cache,
)
from scalelab.store.access.kerberos import KerberosLogin, ticket_failure
from scalelab.store.errors import KerberosTicketError

CORE_SITE = """<?xml version="1.0" encoding="UTF-8"?>
<?xml-stylesheet type="text/xsl" href="configuration.xsl"?>
<configuration>
  <property>
    <name>fs.defaultFS</name>
    <value>hdfs://course-ns</value>
  </property>
  <property>
    <name>hadoop.security.authentication</name>
    <value>kerberos</value>
    <description>Secure cluster</description>
  </property>
</configuration>
"""


HDFS_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>dfs.nameservices</name><value>course-ns,archive</value></property>
  <property><name>dfs.ha.namenodes.course-ns</name><value>nn1, nn2</value></property>
  <property>
    <name>dfs.namenode.rpc-address.course-ns.nn1</name>
    <value>master1.cluster.example:8020</value>
  </property>
  <property>
    <name>dfs.namenode.rpc-address.course-ns.nn2</name>
    <value>master2.cluster.example:8020</value>
  </property>
  <property><name>dfs.namenode.rpc-address.archive</name><value>arch.example:9000</value></property>
  <property>
    <name>dfs.client.failover.proxy.provider.course-ns</name>
    <value>org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider</value>
  </property>
</configuration>
"""


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    """A HADOOP_CONF_DIR of an HA, Kerberos cluster."""
    folder = tmp_path / "hadoop-conf"
    folder.mkdir()
    (folder / "core-site.xml").write_text(CORE_SITE)
    (folder / "hdfs-site.xml").write_text(HDFS_SITE)
    return folder


def test_conf_files_are_read_with_hdfs_site_over_core_site(conf_dir: Path):
    conf = read_hadoop_conf(conf_dir)
    assert conf["fs.defaultFS"] == "hdfs://course-ns"
    assert conf["dfs.ha.namenodes.course-ns"] == "nn1, nn2"
    assert read_hadoop_conf(None) == {} and read_hadoop_conf(conf_dir / "missing") == {}


def test_broken_xml_names_the_file(conf_dir: Path):
    (conf_dir / "hdfs-site.xml").write_text("<configuration><property>")
    with pytest.raises(StoreConfigError, match=r"hdfs-site.xml is not valid XML.*HADOOP_CONF_DIR"):
        read_hadoop_conf(conf_dir)


def test_ha_nameservice_resolves_to_its_namenodes(conf_dir: Path):
    conf = read_hadoop_conf(conf_dir)
    target = resolve_hdfs("hdfs://course-ns/course", conf)
    assert target == HdfsTarget(
        (("master1.cluster.example", 8020), ("master2.cluster.example", 8020)),
        "course-ns",
        "/course",
    )
    assert resolve_hdfs("hdfs:///course", conf) == target  # through fs.defaultFS
    assert resolve_hdfs("hdfs://archive/x", conf).namenodes == (("arch.example", 9000),)
    assert resolve_hdfs("hdfs://nn.example/c", conf).namenodes == (("nn.example", 8020),)
    assert resolve_hdfs("hdfs://nn.example:9820/c", {}).namenodes == (("nn.example", 9820),)


@pytest.mark.parametrize(
    ("url", "conf", "message"),
    [
        ("hdfs:///course", {}, "names no namenode"),
        ("s3://bucket/course", {}, "not an hdfs:// URL"),
        ("hdfs://ns/c", {"dfs.nameservices": "ns"}, "set dfs.ha.namenodes.ns"),
        (
            "hdfs://ns/c",
            {"dfs.nameservices": "ns", "dfs.ha.namenodes.ns": "a,b"},
            "set dfs.namenode.rpc-address.ns.a",
        ),
        (
            "hdfs://ns/c",
            {"dfs.nameservices": "ns", "dfs.namenode.rpc-address.ns": "host:port"},
            "is not host:port",
        ),
    ],
)
def test_unresolvable_urls_name_the_setting(url: str, conf: dict, message: str):
    with pytest.raises(StoreConfigError, match=message):
        resolve_hdfs(url, conf)


def test_kerberos_ticket_cache_location():
    assert ticket_cache({}, 1000) == MIT_DEFAULT_CACHE.format(uid=1000)
    assert ticket_cache({"KRB5CCNAME": "FILE:/run/user/1000/krb5cc"}, 1000) == (
        "/run/user/1000/krb5cc"
    )
    assert ticket_cache({"KRB5CCNAME": "/home/alice/krb5cc"}, 1000) == "/home/alice/krb5cc"
    assert ticket_cache({"KRB5CCNAME": "KEYRING:persistent:1000"}, 1000) is None


def test_missing_kerberos_ticket_names_kinit_and_krb5ccname(conf_dir: Path, tmp_path: Path):
    conf = read_hadoop_conf(conf_dir)
    assert kerberos_required(conf) and not kerberos_required({})
    env = {"KRB5CCNAME": f"FILE:{tmp_path / 'krb5cc_none'}"}
    with pytest.raises(StoreConfigError, match=r"Kerberos ticket.*run kinit.*KRB5CCNAME"):
        check_kerberos(conf, env, os.getuid())
    (tmp_path / "krb5cc_none").write_bytes(b"\x05\x04")  # a ticket cache file now exists
    check_kerberos(conf, env, os.getuid())
    check_kerberos({}, {}, os.getuid())  # no Kerberos: no ticket needed


def test_client_choice_prefers_hdfs_native_then_libhdfs(tmp_path: Path):
    assert choose_client({}) == "hdfs-native"  # installed with ScaleLab
    without_native = {"has_module": lambda name: name != "hdfs_native"}
    native_dir = tmp_path / "hadoop/lib/native"
    native_dir.mkdir(parents=True)
    (native_dir / "libhdfs.so").write_bytes(b"")
    (tmp_path / "hadoop/bin").mkdir()
    (tmp_path / "hadoop/bin/hadoop").write_text("#!/bin/sh\n")
    java = {"JAVA_HOME": str(tmp_path)}
    hadoop_home = {"HADOOP_HOME": str(tmp_path / "hadoop"), **java}
    assert choose_client(hadoop_home, **without_native) == "pyarrow"
    libhdfs_only = {"ARROW_LIBHDFS_DIR": str(native_dir), **java, "CLASSPATH": "/opt/h/*.jar"}
    assert choose_client(libhdfs_only, **without_native) == "pyarrow"
    with pytest.raises(StoreConfigError, match=r"pip install hdfs-native.*ARROW_LIBHDFS_DIR"):
        choose_client({}, **without_native)
    no_java = {"HADOOP_HOME": str(tmp_path / "hadoop"), "JAVA_HOME": str(tmp_path / "no-jdk")}
    with pytest.raises(StoreConfigError, match="set JAVA_HOME"):
        choose_client(no_java, **without_native)
    no_jars = {"ARROW_LIBHDFS_DIR": str(native_dir), **java}
    with pytest.raises(StoreConfigError, match=r"CLASSPATH=.*hadoop classpath --glob"):
        choose_client(no_jars, **without_native)


#: hdfs-native's text for the namenode's refusal (as the HDFS test cluster gives it), shortened.
NATIVE_REFUSAL = (
    'RPCError("org.apache.hadoop.security.AccessControlException", "Permission denied: '
    'user=carol, access=WRITE, inode=\\"/c/home\\":root:supergroup:drwxr-xr-x\\n\\tat '
    "org.apache.hadoop.hdfs.server.namenode.FSPermissionChecker.check(FSPermissionChecker.java:663)"
    '\\n")'
)


def _webhdfs_403(body: bytes) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = 403
    response._content = body
    url = "http://127.0.0.1:9864/webhdfs/v1/c/home/carol/x?op=CREATE&user.name=carol"
    return requests.HTTPError(f"403 Client Error: Forbidden for url: {url}", response=response)


def test_hdfs_refusals_become_permission_errors_with_the_namenodes_reason():
    refusal = hdfs_refusal(RuntimeError(NATIVE_REFUSAL))
    assert isinstance(refusal, PermissionError)
    assert str(refusal) == (
        'HDFS refused it: Permission denied: user=carol, access=WRITE, inode="/c/home":root:'
        "supergroup:drwxr-xr-x"
    )
    body = b'{"RemoteException": {"exception": "AccessControlException", "message": "Permission'
    body += b' denied: user=carol, access=WRITE, inode=\\"/c/home\\"\\n\\tat x"}}'
    refusal = hdfs_refusal(_webhdfs_403(body))
    reason = 'Permission denied: user=carol, access=WRITE, inode="/c/home"'
    assert str(refusal) == f"HDFS refused it: {reason}"
    assert str(hdfs_refusal(_webhdfs_403(b"<html>"))) == "HDFS refused it: 403 Forbidden"
    # Anything else is left as it is.
    assert hdfs_refusal(RuntimeError('RPCError("java.io.FileNotFoundException", "x")')) is None
    webhdfs = PermissionError('Permission denied: user=carol, access=EXECUTE, inode="/c/x"')
    assert str(hdfs_refusal(webhdfs)) == f"HDFS refused it: {webhdfs}"
    assert hdfs_refusal(PermissionError(13, "Permission denied", "/srv/course/x")) is None
    assert hdfs_refusal(OSError("403 Client Error")) is None


def test_up_front_check_refuses_a_kerberos_cluster_without_ticket(conf_dir: Path, tmp_path: Path):
    env = {"HADOOP_CONF_DIR": str(conf_dir), "KRB5CCNAME": str(tmp_path / "no-ticket")}
    with pytest.raises(StoreConfigError, match="kinit"):
        check_store("hdfs://course-ns/course", {}, env)


def test_down_namenode_is_a_clear_error_at_first_use_through_hdfs_native():
    """The real hdfs-native client against a closed port: fails in seconds, not minutes."""
    store = student_store("alice", f"hdfs://127.0.0.1:{free_port()}/course")
    with pytest.raises(StoreUnavailableError, match=r"cannot be reached.*namenode.*store_url"):
        store.ls("home/alice")


def test_ops_setting_of_the_retries_in_hadoop_conf_dir_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """ScaleLab's default (1) applies only where neither store_options nor hdfs-site.xml say;
    ``default_block_size`` (the read-ahead) reaches the file system as its own option."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "hdfs-site.xml").write_text(
        "<configuration><property><name>dfs.client.failover.max.attempts</name>"
        "<value>4</value></property></configuration>"
    )
    seen: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, **kwargs: Any):
            seen.append(kwargs)

    # Records the options hdfs-native's file system is made with; no client.
    monkeypatch.setattr("scalelab.store.access.hdfs_fork.ForkSafeHdfsFileSystem", Recorder)
    open_hdfs("hdfs://127.0.0.1:8020/course", {}, {"HADOOP_CONF_DIR": str(conf)})
    open_hdfs("hdfs://127.0.0.1:8020/course", {}, {})
    open_hdfs("hdfs://127.0.0.1:8020/course", {"dfs.client.failover.max.attempts": "7"}, {})
    assert [kwargs.get("dfs.client.failover.max.attempts") for kwargs in seen] == [None, "1", "7"]
    # The read-ahead's size is the file system's own option, an integer, not a Hadoop property.
    open_hdfs("hdfs://127.0.0.1:8020/course", {"default_block_size": "0"}, {})
    assert seen[-1]["default_block_size"] == 0
    assert all("default_block_size" not in kwargs for kwargs in seen[:3])


#: hdfs-native's words (0.14.7) for no ticket and an expired one, as the secure test cluster
#: gave them (tests/integration/hadoop/test_store_kerberos.py runs them for real).
NO_CRED = (
    'GSSAPIError(GssMajorCodes { raw: "0x00070000", calling_error: "none", routine_error: '
    '"GSS_S_NO_CRED", supplementary_info: "0x0000" }, 2529639053, "No credentials were supplied, '
    "or the credentials were unavailable or inaccessible: No Kerberos credentials available "
    '(default cache: FILE:/home/alice/krb5cc-none)")'
)


EXPIRED = (
    'GSSAPIError(GssMajorCodes { raw: "0x000d0000", calling_error: "none", routine_error: '
    '"GSS_S_FAILURE", supplementary_info: "0x0000" }, 2529638944, "Unspecified GSS failure.  '
    'Minor code may provide more information: Ticket expired")'
)


def _login(**env: str) -> KerberosLogin:
    return KerberosLogin.from_environ({"KRB5CCNAME": "FILE:/home/alice/krb5cc", **env}, 1000)


def test_a_missing_or_expired_ticket_from_hdfs_native_is_one_line_naming_kinit():
    login = _login(
        SCALELAB_KERBEROS_PRINCIPAL="alice@EXAMPLE.ORG",
        SCALELAB_KERBEROS_KEYTAB="/etc/keytabs/alice.keytab",
    )
    kinit = "kinit -kt /etc/keytabs/alice.keytab alice@EXAMPLE.ORG"
    missing = ticket_failure(RuntimeError(NO_CRED), login)
    expired = ticket_failure(RuntimeError(EXPIRED), login)
    assert isinstance(missing, KerberosTicketError) and isinstance(expired, KerberosTicketError)
    assert "there is none in the ticket cache FILE:/home/alice/krb5cc" in str(missing)
    assert "has expired" in str(expired)
    for error in (missing, expired):
        assert kinit in str(error) and "\n" not in str(error) and "GssMajorCodes" not in str(error)
    assert ticket_failure(RuntimeError("RPCError(...)"), login) is None
    assert ticket_failure(OSError("Connection refused"), login) is None


def test_a_ticket_message_without_the_principal_says_whom_to_ask():
    message = str(ticket_failure(RuntimeError(NO_CRED), _login()))
    assert "kinit -kt <your keytab> <your principal>" in message
    assert "SCALELAB_KERBEROS_PRINCIPAL and SCALELAB_KERBEROS_KEYTAB unset" in message


def test_webhdfs_401_is_a_missing_or_refused_ticket_and_403_is_not():
    def http_error(status: int) -> requests.HTTPError:
        response = requests.Response()
        response.status_code = status
        return requests.HTTPError(
            f"{status} Client Error: for url: http://nn:9870/webhdfs/v1/?op=LISTSTATUS",
            response=response,
        )

    login = _login(SCALELAB_KERBEROS_PRINCIPAL="alice@EXAMPLE.ORG")
    gone = ticket_failure(http_error(401), login, cache_exists=lambda _: False)
    there = ticket_failure(http_error(401), login, cache_exists=lambda _: True)
    assert "there is none" in str(gone) and "expired" in str(there)
    assert ticket_failure(http_error(403), login) is None
