"""A course hub on the HDFS test cluster, end to end: ``scalelab up --store hdfs://...``.

Ops' part, as on a course cluster: the data sets fetched into ``hdfs://.../course-hub-<hex>`` by
the HDFS superuser (the user running the tests and the cluster), and a ``--config`` with
``c.ScaleLabSpawner.store_identity_class`` = ``HDFSUserIdentity`` (simple authentication: each
server is its student on HDFS). Then, with one real ``scalelab up``: the hub makes alice's home
on HDFS at her first start (owned by her, mode 0700); the Course store drive shows and saves
through the real server's contents API, HDFS's permissions refusing ``datasets/``; her PySpark
kernel, started through her server, runs on the cluster's YARN (``--config`` sets
``spark_master = "yarn"``, ``hadoop_conf_dir`` and executors' sizes in ``spark_conf``), reads a
data set and writes into her home with Spark's own Hadoop client (as ``alice``, her application
staged in her home of the store); and Lab 1 runs unchanged in her server's environment, its
cross-validation in YARN's executors, only the store URL and the master differing from the
local run of ``tests/labs/test_labs.py``.

One hub for the module, on the session's test cluster (``hdfs_cluster``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scalelab.store import DATASETS, open_store
from scalelab.store.datasets.fetch import fetch_dataset
from tests.conftest import REPO
from tests.support.hadoopcluster import YARN_SPARK_CONF, HadoopTestCluster
from tests.support.hubproc import ScaleLabUp, execute, running, server_environ
from tests.support.labrun import run_lab

CONFIG = """
c.ScaleLabSpawner.store_identity_class = "scalelab.spawner.store_identity.HDFSUserIdentity"
c.ScaleLabSpawner.spark_master = "yarn"
c.ScaleLabSpawner.hadoop_conf_dir = {conf_dir!r}
c.ScaleLabSpawner.spark_conf = {spark_conf!r}
"""


@pytest.fixture(scope="module")
def course_root(hdfs_cluster: HadoopTestCluster, shared_data: Path) -> str:
    """The course folder on HDFS, with both data sets fetched by the superuser."""
    root = f"/course-hub-{uuid.uuid4().hex[:8]}"
    fs = open_store(hdfs_cluster.url(root))
    for spec in DATASETS.values():
        fetch_dataset(spec, fs, mirror=shared_data, log=lambda _line: None)
    return root


@pytest.fixture(scope="module")
def hub(
    tmp_path_factory: pytest.TempPathFactory, hdfs_cluster: HadoopTestCluster, course_root: str
) -> Iterator[ScaleLabUp]:
    state = tmp_path_factory.mktemp("hub-on-hdfs") / "state"
    config = CONFIG.format(conf_dir=str(hdfs_cluster.conf_dir), spark_conf=YARN_SPARK_CONF)
    up = ScaleLabUp(state, extra_config=config)
    up.argv += ["--store", hdfs_cluster.url(course_root)]
    with running(up):
        up.start_server("alice")
        yield up


def _contents(hub: ScaleLabUp, path: str, method: str = "GET", **kwargs):
    return hub.server_api("alice", method, f"/contents/store/{path}".rstrip("/"), **kwargs)


def test_the_hub_makes_the_students_home_on_hdfs(
    hub: ScaleLabUp, hdfs_cluster: HadoopTestCluster, course_root: str
):
    info = hdfs_cluster.webhdfs().info(f"{course_root}/home/alice")
    assert (info["type"], info["owner"], info["permission"]) == ("directory", "alice", "700")
    env = server_environ(hub, "alice")
    assert env["SCALELAB_STORE_URL"] == hdfs_cluster.url(course_root)
    assert env["HADOOP_USER_NAME"] == "alice"


def test_the_course_store_drive_works_on_hdfs(
    hub: ScaleLabUp, hdfs_cluster: HadoopTestCluster, course_root: str
):
    root = _contents(hub, "")
    assert root.status_code == 200, root.text
    assert sorted(e["path"] for e in root.json()["content"]) == ["store/datasets", "store/home"]
    datasets = _contents(hub, "datasets").json()["content"]
    assert {e["name"] for e in datasets} >= {"fashion-mnist", "millionsong"}
    raw = _contents(hub, "datasets/millionsong/raw/millionsong.txt", params={"content": "0"})
    assert raw.status_code == 200, raw.text
    assert raw.json()["writable"] is False and raw.json()["size"] > 1_000_000

    body = {"type": "file", "format": "text", "content": "rmse 10.3\n"}
    saved = _contents(hub, "home/alice/notes.txt", "PUT", json=body)
    assert saved.status_code in (200, 201), saved.text
    written = hdfs_cluster.webhdfs().info(f"{course_root}/home/alice/notes.txt")
    assert (written["owner"], written["size"]) == ("alice", len("rmse 10.3\n"))
    assert _contents(hub, "home/alice/notes.txt").json()["content"] == "rmse 10.3\n"
    payload = base64.b64encode(b"\x00\x01").decode()
    binary = {"type": "file", "format": "base64", "content": payload}
    refused = _contents(hub, "datasets/planted.bin", "PUT", json=binary)
    assert refused.status_code == 403, refused.text
    assert "datasets/planted.bin" in refused.json()["message"]
    assert not hdfs_cluster.webhdfs().exists(f"{course_root}/datasets/planted.bin")


def test_a_hand_in_on_hdfs_is_the_hubs_and_alice_cannot_reach_it_as_herself(
    hub: ScaleLabUp,
    hdfs_cluster: HadoopTestCluster,
    course_root: str,
    monkeypatch: pytest.MonkeyPatch,
):
    """Issue 33: the hub writes hand-ins with its own HDFS identity into submissions/ (0700);
    HDFS itself refuses alice there, whatever her code does."""
    lab = "lab1_millionsong_regression"
    content = (REPO / "notebooks" / "release" / f"{lab}.ipynb").read_bytes()
    token = server_environ(hub, "alice")["JUPYTERHUB_API_TOKEN"]  # her server's own
    handed = requests.post(
        f"{hub.url}/hub/api/scalelab/users/alice/submissions/{lab}",
        data=content,
        headers={"Authorization": f"token {token}"},
        timeout=120,
    )
    assert handed.status_code == 201, handed.text
    receipt = handed.json()
    webhdfs = hdfs_cluster.webhdfs()
    info = webhdfs.info(f"{course_root}/submissions")
    assert (info["type"], info["permission"]) == ("directory", "700")
    assert info["owner"] != "alice"
    assert webhdfs.cat_file(f"{course_root}/{receipt['path']}") == content
    monkeypatch.setenv("HADOOP_USER_NAME", "alice")  # as her server and kernels are
    as_alice = open_store(hdfs_cluster.url(course_root))
    as_alice.pipe_file("home/alice/mine.txt", b"x")
    assert webhdfs.info(f"{course_root}/home/alice/mine.txt")["owner"] == "alice"  # alice there
    refused = "Permission denied: user=alice, access=(EXECUTE|READ_EXECUTE)"  # the namenode's
    with pytest.raises((PermissionError, RuntimeError), match=refused):
        as_alice.cat_file(receipt["path"])
    with pytest.raises((PermissionError, RuntimeError), match=refused):
        as_alice.ls("submissions")
    listed = requests.get(
        f"{hub.url}/hub/api/scalelab/users/alice/submissions",
        headers={"Authorization": f"token {token}"},
        timeout=120,
    )
    assert [r["sha256"] for r in listed.json()["submissions"]] == [receipt["sha256"]]


def test_a_pyspark_kernel_reads_and_writes_hdfs_as_its_student(
    hub: ScaleLabUp, hdfs_cluster: HadoopTestCluster, course_root: str
):
    started = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pyspark"})
    assert started.status_code == 201, started.text
    kernel = started.json()["id"]
    code = """
import json
from scalelab.store import store_url
songs = spark.read.text(store_url("datasets/millionsong/raw/millionsong.txt"))
counted = songs.count()
songs.limit(10).write.mode("overwrite").text(store_url("home/alice/spark-out"))
refusal = None
try:
    songs.limit(1).write.mode("overwrite").text(store_url("datasets/planted"))
except Exception as exc:
    refusal = type(exc).__name__ + ": " + str(exc).splitlines()[0]
print(json.dumps({"count": counted, "refusal": refusal, "master": sc.master,
                  "application": sc.applicationId}))
"""
    uncaught = 'songs.limit(1).write.mode("overwrite").text(store_url("datasets/planted"))'
    try:
        reply = asyncio.run(execute(hub, "alice", kernel, code, timeout_s=300))
        refused = asyncio.run(execute(hub, "alice", kernel, uncaught, timeout_s=300))
    finally:
        hub.server_api("alice", "DELETE", f"/kernels/{kernel}")
    assert reply["status"] == "ok", reply
    answer = json.loads(reply["stdout"].strip().splitlines()[-1])
    assert answer["count"] == 6724
    # On the cluster's YARN, as alice, staged in her own home of the store.
    assert answer["master"] == "yarn", answer
    app = hdfs_cluster.resourcemanager(f"apps/{answer['application']}")["app"]
    assert app["user"] == "alice", app
    staging = f"{course_root}/home/alice/.sparkStaging"
    assert hdfs_cluster.webhdfs().info(staging)["owner"] == "alice"
    assert answer["refusal"].startswith("Py4JJavaError"), answer
    # Uncaught, the student reads the namenode's reason and where to write, first.
    assert refused["error"] is not None, refused
    assert "ScaleLab: HDFS refused it: Permission denied: user=alice, access=WRITE" in refused.get(
        "stderr", ""
    ), refused
    assert "store_url('home/alice/results')" in refused["stderr"]
    out = hdfs_cluster.webhdfs().info(f"{course_root}/home/alice/spark-out")
    assert out["owner"] == "alice"
    assert not hdfs_cluster.webhdfs().exists(f"{course_root}/datasets/planted")


@pytest.mark.lab
def test_lab1_runs_unchanged_on_the_hdfs_store_with_its_cross_validation_on_yarn(
    hub: ScaleLabUp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Lab 1's reference version, in alice's server's own environment (its store URL on HDFS,
    ``HADOOP_USER_NAME=alice``, Spark on YARN), executed by nbclient with the lab's kernelspec;
    the driver's log in a folder of the test's own."""
    env = {k: v for k, v in server_environ(hub, "alice").items() if k != "PYTEST_CURRENT_TEST"}
    assert env["SCALELAB_STORE_URL"].startswith("hdfs://")
    env["SCALELAB_LOG_DIR"] = str(tmp_path / "logs")
    monkeypatch.setenv("JUPYTER_PATH", env["JUPYTER_PATH"])  # the server's kernelspecs
    results, nb = run_lab(
        REPO / "notebooks" / "lab1_millionsong_regression.ipynb",
        workdir=tmp_path,
        env=env,
        results=("num_points", "rmse_baseline", "rmse_lr", "rmse_tuned", "gd_rel_error"),
        timeout_s=900,
    )
    assert results["num_points"] == 6724
    assert results["gd_rel_error"] < 1e-6
    assert results["rmse_lr"] < results["rmse_baseline"]
    assert results["rmse_tuned"] < results["rmse_baseline"]
    shown = "".join(out.get("text", "") for cell in nb.cells for out in cell.get("outputs", []))
    assert "| master yarn" in shown
    # The work, the cross-validation's fits included, ran in the two executors' containers:
    # the driver's log (INFO, the scheduler's lines) names the executor of each finished task.
    [log] = (tmp_path / "logs").glob("spark-driver-*.log")
    executors = re.findall(
        r"Finished task .* in stage \S+ \(TID \d+\) in \d+ ms on \S+ \(executor (\d+)\)",
        log.read_text(),
    )
    assert set(executors) == {"1", "2"}, set(executors)
    assert len(executors) > 100  # gradient descent and 18 cross-validation fits: 549 tasks
