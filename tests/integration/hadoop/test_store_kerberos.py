"""The course store on a Kerberos HDFS: the test cluster with ``kerberos=True`` (its KDC and a
secure namenode and datanode, its own JVM for this module), each student with their own
principal, keytab and ticket cache.

A student's server holds the student's ticket (``kinit -kt <keytab> alice@SCALELAB.TEST`` into a
private ``KRB5CCNAME``; ``KRB5_CONFIG`` the cluster's krb5.conf), and both clients authenticate
with it: hdfs-native over the namenode's RPC (GSSAPI) and the datanode's SASL, fsspec's WebHDFS
with SPNEGO (``kerberos=True``, requests-kerberos) over HTTPS (the cluster serves WebHDFS on
HTTPS only, with a self-signed certificate the store's ``session_verify`` trusts). HDFS's
permissions then apply to the principal's short name: the home read-write, ``datasets/``
read-only, another's home refused, even to a client without ScaleLab's guard. A missing ticket
and an expired one each end the call at once with one line naming ``kinit``, the principal and
the keytab.

The course is laid out by the hub's principal (``scalelab``, in the superuser group), as ops
would: ``datasets/`` its own (755), each home its student's (700).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hdfs_native.fsspec import HdfsFileSystem

from scalelab import envvars
from scalelab.spawner.store_identity import HDFSUserIdentity
from scalelab.store import StoreAccessError, check_store, student_store
from scalelab.store.access.hdfs import kerberos_required, read_hadoop_conf
from scalelab.store.errors import KerberosTicketError
from tests.support.hadoopcluster import HadoopTestCluster, running_cluster

pytestmark = pytest.mark.timeout(300)

STUDENTS = ("alice", "bob")
PROTOCOLS = ["hdfs", "webhdfs"]
DATASET_FILE = "datasets/demo/part-0.csv"
#: How each client reports HDFS's refusal to a client without the guard (as in
#: tests/integration/hadoop/test_store_hdfs_cluster.py): hdfs-native a RuntimeError naming the
#: namenode's
#: AccessControlException, WebHDFS a PermissionError or requests' HTTPError 403.
REFUSALS = (RuntimeError, OSError)
REFUSED = r"AccessControlException|Permission denied|403 Client Error"


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HadoopTestCluster]:
    """The Kerberos cluster, with principals and keytabs for alice and bob."""
    yield from running_cluster(
        tmp_path_factory.mktemp("hdfs-kerberos"), kerberos=True, students=STUDENTS
    )


@pytest.fixture(scope="module")
def course_root(secure_cluster: HadoopTestCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A course folder laid out by the hub's principal: ``/course-<hex>``."""
    root = f"/course-{uuid.uuid4().hex[:8]}"
    cache = tmp_path_factory.mktemp("hub-ticket") / "krb5cc"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in secure_cluster.kinit("scalelab", cache).items():
            mp.setenv(key, value)
        mp.delenv("HADOOP_USER_NAME", raising=False)
        hub = HdfsFileSystem(
            host="127.0.0.1", port=secure_cluster.rpc_port, skip_instance_cache=True
        )
        hub.makedirs(f"{root}/datasets/demo", exist_ok=True)
        hub.pipe_file(f"{root}/{DATASET_FILE}", b"x,y\n1,2\n")
        for student in STUDENTS:
            home = f"{root}/home/{student}"
            hub.makedirs(home, exist_ok=True)
            hub.client.set_owner(home, student, student)
            hub.client.set_permission(home, 0o700)
        assert hub.info(f"{root}/home/alice")["owner"] == "alice"
    return root


def url(cluster: HadoopTestCluster, protocol: str, root: str) -> str:
    """The store URL of the course folder through ``protocol``."""
    return cluster.url(root) if protocol == "hdfs" else cluster.webhdfs_url(root)


def options(protocol: str, cluster: HadoopTestCluster) -> dict[str, Any]:
    """The student's ``storage_options``: WebHDFS over HTTPS (the cluster's certificate
    trusted), negotiating SPNEGO with the ticket; nothing for hdfs-native, which reads
    ``HADOOP_CONF_DIR`` and the ticket cache itself."""
    if protocol == "hdfs":
        return {}
    assert cluster.kerberos_info is not None
    return {"kerberos": True, "use_https": True, "session_verify": cluster.kerberos_info["ca_pem"]}


@pytest.fixture
def as_student(
    secure_cluster: HadoopTestCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Any:
    """``as_student(user, ticket=True, lifetime=None)``: the environment of the student's
    server (``KRB5_CONFIG``, a private ``KRB5CCNAME``, ``HADOOP_CONF_DIR``, and the principal
    and keytab ops name in ``SCALELAB_KERBEROS_PRINCIPAL`` / ``_KEYTAB``), with a ticket from
    the student's keytab unless ``ticket`` is False. Returns the ticket cache's path."""

    def become(user: str, ticket: bool = True, lifetime: str | None = None) -> Path:
        cache = tmp_path / f"krb5cc_{user}"
        env = (
            secure_cluster.kinit(user, cache, lifetime)
            if ticket
            else secure_cluster.kerberos_environment(cache)
        )
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv(envvars.KERBEROS_PRINCIPAL, secure_cluster.principal(user))
        monkeypatch.setenv(envvars.KERBEROS_KEYTAB, secure_cluster.keytab(user))
        monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
        monkeypatch.delenv("HADOOP_PROXY_USER", raising=False)
        # requests prefers these to a session's own ``verify`` (the cluster's CA): unset here.
        monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
        monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
        return cache

    return become


def test_the_secure_cluster_has_a_kdc_principals_and_keytabs(secure_cluster: HadoopTestCluster):
    info = secure_cluster.kerberos_info
    assert info is not None
    assert info["realm"] == "SCALELAB.TEST" and info["kdc_port"] > 0
    assert f"127.0.0.1:{info['kdc_port']}" in Path(info["krb5_conf"]).read_text()
    assert kerberos_required(read_hadoop_conf(secure_cluster.conf_dir))
    assert secure_cluster.superuser == "hdfs"
    for name in ("hdfs", "HTTP", "scalelab", *STUDENTS):
        listed = subprocess.run(
            ["klist", "-kt", secure_cluster.keytab(name)], capture_output=True, text=True
        )
        assert secure_cluster.principal(name) in listed.stdout, listed.stderr
    assert secure_cluster.principal("alice") == "alice@SCALELAB.TEST"
    assert secure_cluster.principal("hdfs") == "hdfs/localhost@SCALELAB.TEST"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_students_store_works_with_the_students_ticket(
    secure_cluster: HadoopTestCluster, course_root: str, protocol: str, as_student: Any
):
    as_student("alice")
    store = student_store(
        "alice", url(secure_cluster, protocol, course_root), options(protocol, secure_cluster)
    )
    name = f"home/alice/notes-{protocol}.bin"
    payload = os.urandom(2 * 1024 * 1024 + 5)  # through the datanode's SASL, several packets
    store.pipe_file(name, payload)
    assert store.cat_file(name) == payload
    # The file is the principal's own: the ticket's identity reached the namenode.
    assert store.info(name)["owner"] == "alice"
    assert store.cat_file(DATASET_FILE) == b"x,y\n1,2\n"
    with pytest.raises(StoreAccessError, match="read-only"):
        store.pipe_file("datasets/demo/planted.csv", b"x")
    with pytest.raises(StoreAccessError):
        store.ls("home/bob")
    store.rm(name)
    assert not store.exists(name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hdfs_enforces_the_rules_for_the_principal_without_the_guard(
    secure_cluster: HadoopTestCluster, course_root: str, protocol: str, as_student: Any
):
    """The back end under the student's view, with bob's ticket: the namenode itself refuses
    writing into ``datasets/`` and reading or writing alice's home."""
    as_student("bob")
    raw = student_store(
        "bob", url(secure_cluster, protocol, course_root), options(protocol, secure_cluster)
    ).fs
    attempts = {
        "writing into datasets/": lambda: raw.pipe_file(f"{course_root}/datasets/demo/x", b"x"),
        "replacing a data set file": lambda: raw.pipe_file(f"{course_root}/{DATASET_FILE}", b""),
        "reading alice's home": lambda: raw.ls(f"{course_root}/home/alice"),
        "writing into alice's home": lambda: raw.pipe_file(f"{course_root}/home/alice/x", b"x"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(REFUSALS) as refused:
            attempt()
        assert re.search(REFUSED, str(refused.value)), f"{what}: {refused.value!r}"
        assert "user=bob" in str(refused.value) or protocol == "webhdfs", what
    raw.pipe_file(f"{course_root}/home/bob/mine.txt", b"own home")  # and the home is writable
    assert raw.cat_file(f"{course_root}/home/bob/mine.txt") == b"own home"
    raw.rm(f"{course_root}/home/bob/mine.txt")


def one_line_naming_kinit(message: str, cluster: HadoopTestCluster, user: str) -> None:
    """The message is one line with the kinit command, the principal and the keytab."""
    assert "\n" not in message and "Traceback" not in message and "GssMajorCodes" not in message
    assert f"kinit -kt {cluster.keytab(user)} {cluster.principal(user)}" in message, message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_missing_ticket_is_one_message_naming_kinit_the_principal_and_the_keytab(
    secure_cluster: HadoopTestCluster, course_root: str, protocol: str, as_student: Any
):
    cache = as_student("alice", ticket=False)
    assert not cache.exists()
    with pytest.raises(KerberosTicketError) as missing:
        store = student_store(
            "alice", url(secure_cluster, protocol, course_root), options(protocol, secure_cluster)
        )
        store.ls("home/alice")  # WebHDFS asks the namenode only now
    message = str(missing.value)
    one_line_naming_kinit(message, secure_cluster, "alice")
    assert "there is none" in message and str(cache) in message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_expired_ticket_is_one_message_naming_kinit_the_principal_and_the_keytab(
    secure_cluster: HadoopTestCluster, course_root: str, protocol: str, as_student: Any
):
    cache = as_student("alice", lifetime="2s")
    env = {**os.environ}
    deadline = time.monotonic() + 60
    while subprocess.run(["klist", "-s"], env=env).returncode == 0:  # valid until it is not
        assert time.monotonic() < deadline, "kinit -l 2s gave a ticket that does not expire"
        time.sleep(0.5)
    assert cache.exists()
    store = student_store(
        "alice", url(secure_cluster, protocol, course_root), options(protocol, secure_cluster)
    )
    with pytest.raises(KerberosTicketError) as expired:
        store.ls("home/alice")
    message = str(expired.value)
    one_line_naming_kinit(message, secure_cluster, "alice")
    assert "expired" in message
    # The fix the message names works: a new ticket, and the same store goes on.
    secure_cluster.kinit("alice", cache)
    assert isinstance(store.ls("home/alice"), list)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_up_front_check_passes_with_a_ticket_and_names_kinit_without(
    secure_cluster: HadoopTestCluster, course_root: str, protocol: str, as_student: Any
):
    """``check_store``, run when a kernel starts: no namenode call, but the ticket cache."""
    store_url = url(secure_cluster, protocol, course_root)
    as_student("alice", ticket=False)
    if protocol == "hdfs":  # WebHDFS's ticket is only asked for at the first call
        with pytest.raises(KerberosTicketError) as missing:
            check_store(store_url, options(protocol, secure_cluster))
        one_line_naming_kinit(str(missing.value), secure_cluster, "alice")
    as_student("alice")
    check_store(store_url, options(protocol, secure_cluster))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_proxy_mode_the_hubs_principal_acts_for_the_student(
    secure_cluster: HadoopTestCluster,
    course_root: str,
    protocol: str,
    as_student: Any,
    monkeypatch: pytest.MonkeyPatch,
):
    """``c.HDFSUserIdentity.mode = "proxy"``: the server holds the hub's ticket and acts as the
    student (``HADOOP_PROXY_USER``, WebHDFS's ``doas``); what it writes is the student's."""
    as_student("scalelab")
    store_url = url(secure_cluster, protocol, course_root)
    identity = HDFSUserIdentity(mode="proxy")
    for key, value in identity.server_environment("alice", store_url).items():
        monkeypatch.setenv(key, value)
    store = student_store(
        "alice",
        store_url,
        identity.server_store_options("alice", store_url, options(protocol, secure_cluster)),
    )
    name = f"home/alice/by-proxy-{protocol}.txt"
    store.pipe_file(name, b"on behalf")
    assert store.info(name)["owner"] == "alice"
    store.rm(name)
