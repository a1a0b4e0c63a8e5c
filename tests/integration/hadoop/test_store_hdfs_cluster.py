"""The course store on a real HDFS: the test cluster (``tests/support/hadoopcluster.py``), one per
run.

Both ways ScaleLab reaches HDFS, ``hdfs://`` (hdfs-native, over the namenode's RPC and the
datanode's transfer protocol) and ``webhdfs://`` (fsspec's WebHDFS, over HTTP), through the
store layer; the student's view with the student's own HDFS identity, as
``HDFSUserIdentity`` gives it to a server; HDFS's permissions refusing what the identity may
not do even to a client without ScaleLab's guard, and their refusals in the student's view as
one-line ``PermissionError``s; the hub's user acting for a student; and ``scalelab data fetch``
publishing a data set into HDFS with a rename, or leaving nothing when interrupted. The course
folder is laid out as ops would: ``datasets/`` owned by the hub's user (the HDFS superuser
here) with mode 755, each home owned by its student, 700.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fsspec.tests.abstract import (
    AbstractCopyTests,
    AbstractFixtures,
    AbstractGetTests,
    AbstractOpenTests,
    AbstractPipeTests,
    AbstractPutTests,
)
from hdfs_native.fsspec import HdfsFileSystem

from scalelab.spawner.store_identity import HDFSUserIdentity
from scalelab.store import (
    StoreAccessError,
    StudentStore,
    check_store,
    fetch_dataset,
    missing_datasets,
    open_store,
    student_store,
)
from scalelab.store.access.hdfs import read_hadoop_conf, resolve_hdfs
from scalelab.store.datasets.catalog import FASHION_MNIST
from scalelab.store.datasets.fetch import MANIFEST, is_present, renames_atomically
from tests.support.hadoopcluster import ClusterStartError, HadoopTestCluster, missing_reason
from tests.support.interrupts import interrupt_at_upload

PROTOCOLS = ["hdfs", "webhdfs"]
STUDENTS = ("alice", "bob")
DATASET_FILE = "datasets/demo/part-0.csv"
#: How each client reports HDFS's refusal: hdfs-native a RuntimeError naming the namenode's
#: AccessControlException; WebHDFS a PermissionError for the namenode's own operations, and
#: requests' HTTPError (an OSError) "403 Client Error" when the datanode refuses a write.
REFUSALS = (RuntimeError, OSError)
REFUSED = r"AccessControlException|Permission denied|403 Client Error"


@dataclass
class Course:
    """A course folder on the test cluster, laid out as ops would lay it out."""

    cluster: HadoopTestCluster
    root: str  # "/course-1a2b3c4d"

    def url(self, protocol: str) -> str:
        """The store URL of the course folder through ``protocol`` (``hdfs``, ``webhdfs``)."""
        if protocol == "hdfs":
            return self.cluster.url(self.root)
        return self.cluster.webhdfs_url(self.root)

    def path(self, rel: str) -> str:
        """The HDFS path of ``rel`` in the course folder."""
        return f"{self.root}/{rel}"


@pytest.fixture(scope="module")
def course(hdfs_cluster: HadoopTestCluster) -> Course:
    admin = hdfs_cluster.webhdfs()
    course = Course(hdfs_cluster, f"/course-{uuid.uuid4().hex[:8]}")
    admin.makedirs(course.path("datasets/demo"))
    admin.pipe_file(course.path(DATASET_FILE), b"x,y\n1,2\n")
    for student in STUDENTS:
        home = course.path(f"home/{student}")
        admin.makedirs(home)
        admin.chown(home, owner=student)
        admin.chmod(home, "700")
    return course


@pytest.fixture
def as_student(monkeypatch: pytest.MonkeyPatch, hdfs_cluster: HadoopTestCluster) -> Iterator[Any]:
    """``as_student(user, url)`` -> the student's ``storage_options``, with the environment of
    the student's server set (``HADOOP_CONF_DIR``; ``HADOOP_USER_NAME`` for ``hdfs://``), as
    ``HDFSUserIdentity`` (simple mode) gives them to a server."""
    identity = HDFSUserIdentity()

    def become(user: str, url: str) -> dict[str, Any]:
        monkeypatch.setenv("HADOOP_CONF_DIR", str(hdfs_cluster.conf_dir))
        for key, value in identity.server_environment(user, url).items():
            monkeypatch.setenv(key, value)
        return identity.server_store_options(user, url, {})

    yield become


@pytest.fixture
def as_superuser(monkeypatch: pytest.MonkeyPatch, hdfs_cluster: HadoopTestCluster) -> None:
    """The environment of ops' own tools: ``HADOOP_CONF_DIR``, no ``HADOOP_USER_NAME`` (the
    client is the user running the tests, the HDFS superuser)."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hdfs_cluster.conf_dir))
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    monkeypatch.delenv("HADOOP_PROXY_USER", raising=False)


def _ops_options(cluster: HadoopTestCluster, protocol: str) -> dict[str, Any]:
    return {"user": cluster.superuser} if protocol == "webhdfs" else {}


def test_the_cluster_writes_a_client_configuration_that_resolves(
    hdfs_cluster: HadoopTestCluster,
):
    conf = read_hadoop_conf(hdfs_cluster.conf_dir)
    assert conf["fs.defaultFS"] == f"hdfs://127.0.0.1:{hdfs_cluster.rpc_port}"
    assert conf["dfs.namenode.http-address"] == f"127.0.0.1:{hdfs_cluster.http_port}"
    assert conf["hadoop.security.authentication"] == "simple"
    target = resolve_hdfs("hdfs:///course", conf)  # the namenode from fs.defaultFS
    assert target.namenodes == (("127.0.0.1", hdfs_cluster.rpc_port),)


def test_a_cluster_that_cannot_start_fails_with_the_jvms_own_words(tmp_path: Path):
    """The harness's failure: the JVM's exit status and last lines, not a bare time-out."""
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    cluster = HadoopTestCluster(tmp_path / "tiny-heap", heap="1k")
    with pytest.raises(ClusterStartError, match=r"did not start \(exit status 1\)") as failed:
        cluster.start(timeout_s=60)
    assert "Too small maximum heap" in str(failed.value)
    assert cluster.proc is not None and cluster.proc.poll() is not None


@pytest.mark.usefixtures("as_superuser")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_store_at_the_namenodes_root_lists_and_opens(course: Course, protocol: str):
    """A course store at ``hdfs://namenode:8020/``: fsspec's DirFileSystem at ``/`` asserted
    that ``/x`` starts with ``//`` on every listing of a non-empty folder."""
    root = course.url(protocol).rsplit("/", 1)[0] + "/"
    store = open_store(root, _ops_options(course.cluster, protocol))
    course_folder = course.url(protocol).rsplit("/", 1)[1]
    assert course_folder in store.ls("", detail=False)
    assert course_folder in store.ls("/", detail=False)
    folder = f"root-{protocol}-{uuid.uuid4().hex[:6]}"
    store.pipe_file(f"{folder}/a.txt", b"a")
    assert store.ls(folder, detail=False) == [f"{folder}/a.txt"]
    assert store.find(folder) == [f"{folder}/a.txt"]
    assert store.cat_file(f"{folder}/a.txt") == b"a"
    store.rm(folder, recursive=True)
    assert folder not in store.ls("", detail=False)


@pytest.mark.usefixtures("as_superuser")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_store_round_trips_through_each_protocol(course: Course, protocol: str):
    """Ops' view of the store (``open_store``): write, read, list, rename, remove."""
    url = course.url(protocol)
    check_store(url, _ops_options(course.cluster, protocol))
    store = open_store(url, _ops_options(course.cluster, protocol))
    folder = f"scratch-{protocol}"
    payload = os.urandom(3 * 1024 * 1024 + 17)  # more than one packet of the transfer protocol
    store.pipe_file(f"{folder}/a.bin", payload)
    assert store.cat_file(f"{folder}/a.bin") == payload
    assert store.info(f"{folder}/a.bin")["size"] == len(payload)
    assert store.ls(folder, detail=False) == [f"{folder}/a.bin"]
    store.mv(f"{folder}/a.bin", f"{folder}/b.bin")
    assert store.ls(folder, detail=False) == [f"{folder}/b.bin"]
    with store.open(f"{folder}/b.bin", "rb") as f:
        f.seek(len(payload) - 17)
        assert f.read() == payload[-17:]
    store.rm(folder, recursive=True)
    assert not store.exists(folder)
    # What the store wrote is in HDFS, where the other protocol sees it.
    store.pipe_file("seen-by-both.txt", b"one cluster")
    assert course.cluster.webhdfs().cat_file(course.path("seen-by-both.txt")) == b"one cluster"
    store.rm("seen-by-both.txt")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_students_view_with_the_students_own_hdfs_identity(
    course: Course, protocol: str, as_student: Any
):
    url = course.url(protocol)
    options = as_student("alice", url)
    store = student_store("alice", url, options)
    name = f"home/alice/notes-{protocol}.txt"
    store.pipe_file(name, b"my work")
    assert store.cat_file(name) == b"my work"
    # The file is the student's own in HDFS: the identity reached the namenode.
    owner = course.cluster.webhdfs().info(course.path(name))["owner"]
    assert owner == "alice"
    assert name in store.ls("home/alice", detail=False)
    store.mv(name, f"{name}.old")
    assert store.cat_file(f"{name}.old") == b"my work"
    assert store.ls("home", detail=False) == ["home/alice"]
    assert store.cat_file(DATASET_FILE) == b"x,y\n1,2\n"
    with pytest.raises(StoreAccessError, match="read-only"):
        store.pipe_file("datasets/demo/planted.csv", b"x")
    for escape in ("home/bob/peek.txt", "../outside.txt", "home/alice/../../escape.txt"):
        with pytest.raises(StoreAccessError):
            store.pipe_file(escape, b"x")
    store.rm(f"{name}.old")
    assert not store.exists(f"{name}.old")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hdfs_itself_refuses_a_student_who_bypasses_the_guard(
    course: Course, protocol: str, as_student: Any
):
    """A client without ScaleLab's guard (``store.fs``, or hdfs-native by hand), with the
    student's identity: HDFS's permissions refuse the data sets and another student's home."""
    url = course.url(protocol)
    options = as_student("bob", url)
    raw = student_store("bob", url, options).fs  # the back end, unguarded
    if protocol == "hdfs":
        assert isinstance(raw, HdfsFileSystem)
    attempts = {
        "writing into datasets/": lambda: raw.pipe_file(course.path("datasets/demo/x.csv"), b"x"),
        "replacing a data set file": lambda: raw.pipe_file(course.path(DATASET_FILE), b"gone"),
        "removing a data set": lambda: raw.rm(course.path("datasets/demo"), recursive=True),
        "reading alice's home": lambda: raw.ls(course.path("home/alice")),
        "writing into alice's home": lambda: raw.pipe_file(course.path("home/alice/x"), b"x"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(REFUSALS) as refused:
            attempt()
        assert re.search(REFUSED, str(refused.value)), f"{what}: {refused.value!r}"
    admin = course.cluster.webhdfs()
    assert admin.cat_file(course.path(DATASET_FILE)) == b"x,y\n1,2\n"
    assert not admin.exists(course.path("datasets/demo/x.csv"))
    assert not admin.exists(course.path("home/alice/x"))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_what_hdfs_refuses_in_the_students_view_is_a_permission_error_with_the_reason(
    course: Course, protocol: str, as_student: Any
):
    """A student without a home (ops did not make it) and a data set closed to students: the
    guard allows both, the namenode refuses, and the student reads why in one line."""
    admin = course.cluster.webhdfs()
    admin.makedirs(course.path("datasets/exam"), exist_ok=True)
    admin.pipe_file(course.path("datasets/exam/answers.csv"), b"42\n")
    admin.chmod(course.path("datasets/exam"), "700")
    url = course.url(protocol)
    store = student_store("carol", url, as_student("carol", url))
    refusals = {
        "access=WRITE": lambda: store.pipe_file("home/carol/first.txt", b"x"),
        "access=READ_EXECUTE": lambda: store.ls("datasets/exam"),
        "access=EXECUTE": lambda: store.cat_file("datasets/exam/answers.csv"),
    }
    for access, attempt in refusals.items():
        with pytest.raises(PermissionError) as refused:
            attempt()
        message = str(refused.value)
        assert message.startswith("HDFS refused it: Permission denied: user=carol, " + access)
        assert "\n" not in message and "\\n" not in message and "FSPermissionChecker" not in message
    assert not admin.exists(course.path("home/carol"))


def test_the_hub_user_may_act_as_a_student(course: Course, hdfs_cluster: HadoopTestCluster):
    """``hadoop.proxyuser.<superuser>.*``: the hub's user impersonates a student (WebHDFS's
    ``doas``), and what it writes is the student's."""
    proxy = hdfs_cluster.webhdfs(proxy_to="alice")
    path = course.path("home/alice/by-proxy.txt")
    proxy.pipe_file(path, b"on behalf")
    assert hdfs_cluster.webhdfs().info(path)["owner"] == "alice"
    bob = hdfs_cluster.webhdfs("bob", proxy_to="alice")  # bob may not impersonate anyone
    with pytest.raises(REFUSALS, match=r"(?i)not allowed to impersonate"):
        bob.cat_file(path)
    hdfs_cluster.webhdfs().rm(path)


@pytest.fixture
def empty_course(hdfs_cluster: HadoopTestCluster) -> str:
    """A new, empty course folder's path; the superuser's."""
    root = f"/fetch-{uuid.uuid4().hex[:8]}"
    hdfs_cluster.webhdfs().makedirs(root)
    return root


@pytest.mark.usefixtures("as_superuser")
def test_scalelab_data_fetch_publishes_into_hdfs_by_rename(
    hdfs_cluster: HadoopTestCluster, empty_course: str, shared_data: Path, as_student: Any
):
    url = hdfs_cluster.url(empty_course)
    assert renames_atomically(open_store(url))
    env = {key: value for key, value in os.environ.items() if not key.startswith("SCALELAB_")}
    argv = [
        str(Path(sys.executable).with_name("scalelab")),
        *("data", "fetch", "fashion-mnist", "--no-download"),
        *("--store", url, "--mirror", str(shared_data)),
    ]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "fashion-mnist: written to datasets/fashion-mnist/" in first.stdout
    store = open_store(url)
    assert is_present(store, FASHION_MNIST)
    assert store.ls("datasets", detail=False) == ["datasets/fashion-mnist"]  # no .staging left
    manifest = json.loads(store.cat_file(f"datasets/fashion-mnist/{MANIFEST}"))
    assert manifest["rows"] == {"train": 60000, "test": 10000}
    shards = pq.read_table("datasets/fashion-mnist/parquet/test", filesystem=store)
    assert shards.num_rows == 10000

    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already in the store at datasets/fashion-mnist/, nothing to do" in again.stdout

    # A student reads the data set with their own identity, and HDFS keeps it read-only.
    options = as_student("alice", url)
    student = student_store("alice", url, options)
    raw = student.cat_file(f"datasets/fashion-mnist/{MANIFEST}")
    assert json.loads(raw)["dataset"] == "fashion-mnist"
    with pytest.raises(REFUSALS, match=REFUSED):
        student.fs.rm(f"{empty_course}/datasets/fashion-mnist", recursive=True)
    assert is_present(open_store(url), FASHION_MNIST)


@pytest.mark.usefixtures("as_superuser")
def test_an_interrupted_fetch_into_hdfs_leaves_nothing(
    hdfs_cluster: HadoopTestCluster,
    empty_course: str,
    shared_data: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    """Ctrl-C after the first file is up (the store's second upload raises KeyboardInterrupt):
    the staged files are removed and no data set appears; a re-run publishes it whole."""
    store = open_store(hdfs_cluster.url(empty_course))
    real_put_file = store.put_file
    uploads = interrupt_at_upload(store, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        fetch_dataset(FASHION_MNIST, store, mirror=shared_data, log=lambda _: None, download=False)
    assert uploads[0].startswith("datasets/.staging/fashion-mnist-")  # staged, not in place
    assert hdfs_cluster.webhdfs().find(empty_course) == []  # no file left anywhere
    assert not store.exists("datasets/fashion-mnist")
    assert "fashion-mnist" in missing_datasets(store)

    monkeypatch.setattr(store, "put_file", real_put_file)
    assert fetch_dataset(FASHION_MNIST, store, mirror=shared_data, log=lambda _: None)
    assert is_present(store, FASHION_MNIST)


# -- fsspec's conformance tests on a student's home in HDFS ---------------------------------------


class _HDFSConformance(AbstractFixtures, AbstractCopyTests, AbstractOpenTests, AbstractPipeTests):
    """fsspec.tests.abstract against ``student_store`` at a fresh folder of ``home/alice``,
    with alice's own HDFS identity (as ``HDFSUserIdentity`` gives it)."""

    protocol = ""

    @pytest.fixture
    def fs(self, course: Course, as_student: Any) -> StudentStore:
        url = course.url(self.protocol)
        return student_store("alice", url, as_student("alice", url))

    @pytest.fixture
    def fs_path(self) -> str:
        return f"home/alice/conformance-{uuid.uuid4().hex[:6]}"

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return True


class TestStudentStoreOnHDFSConformance(_HDFSConformance, AbstractGetTests, AbstractPutTests):
    protocol = "hdfs"


class TestStudentStoreOnWebHDFSConformance(_HDFSConformance):
    protocol = "webhdfs"
