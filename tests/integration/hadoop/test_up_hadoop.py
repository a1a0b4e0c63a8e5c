"""``scalelab up --hadoop``: the course's cluster path with one command, on a hub run as root.

The Hadoop test cluster (HDFS and YARN in one JVM) runs as the hub's managed service
``scalelab-hadoop``, as its own system user (never root); the course store is on its HDFS, a
student's server runs as the student's system user and is the student on HDFS, and a PySpark cell
runs on its YARN as the student; with the operators' guide's dynamic allocation in the operator's
``--config``, the idle kernel's executors are given back and come again for the next cell;
``scalelab doctor --hadoop`` finds the running cluster healthy. Stopped with the hub, the
cluster's processes are gone and its ports free; started again on the same state folder, it has
the same ports and the student's file is still there.

Its own cluster, not the session's ``hdfs_cluster``: the cluster's life with the hub is what is
tested. The state folder is in a 0755 folder of its own (pytest's are 0700: the cluster's user and
the student's could not reach it).
"""

from __future__ import annotations

import asyncio
import json
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from scalelab.commands.up_hadoop import CLUSTER_USER, SERVICE_NAME, missing_reason
from scalelab.common.ports import port_free
from tests.support import sysusers
from tests.support.hubproc import (
    ScaleLabUp,
    execute,
    running,
    server_environ,
    server_process,
)

pytestmark = [
    *sysusers.MARKS,
    pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason())),
]

STUDENT = "hadoopy"

#: The operators' guide's dynamic allocation, in the operator's ``--config`` (short idle timeouts:
#: executors given back seconds after the cell).
DYNAMIC_CONFIG = """
from scalelab.commands.up_hadoop import SPARK_CONF
c.ScaleLabSpawner.spark_conf = {
    **SPARK_CONF,
    "spark.dynamicAllocation.enabled": "true",
    "spark.dynamicAllocation.shuffleTracking.enabled": "true",
    "spark.dynamicAllocation.minExecutors": "0",
    "spark.dynamicAllocation.maxExecutors": "2",
    "spark.dynamicAllocation.executorIdleTimeout": "2s",
    "spark.dynamicAllocation.shuffleTracking.timeout": "2s",
}
"""

SPARK_CELL = """
import json
from scalelab.store import open_store
total = spark.range(1000).selectExpr("sum(id) AS s").first()["s"]
open_store().pipe("home/hadoopy/kept.txt", b"kept across restarts\\n")
print(json.dumps({"total": total, "master": sc.master, "application": sc.applicationId}))
"""


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="scalelab-up-hadoop-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        sysusers.remove_users([STUDENT])
        shutil.rmtree(root, ignore_errors=True)


def _up(folder: Path, extra_config: str = "") -> ScaleLabUp:
    up = ScaleLabUp(folder / "state", extra_config=extra_config, shared_identity=False)
    up.argv.append("--hadoop")
    return up


def _ports(folder: Path) -> dict[str, int]:
    return json.loads((folder / "state" / "hadoop" / "ports.json").read_text())


def _cluster_jvms(folder: Path) -> list[psutil.Process]:
    data = str(folder / "state" / "hadoop" / "data")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[:1] and cmdline[0].endswith("java") and any(data in a for a in cmdline):
            found.append(proc)
    return found


def _containers_when_idle(app_url: str, timeout_s: float = 90) -> int:
    """The application's running containers once its executors are given back (the
    application master's alone: 1), or their count at ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    running = -1
    while time.monotonic() < deadline:
        running = requests.get(app_url, timeout=30).json()["app"]["runningContainers"]
        if running == 1:
            break
        time.sleep(1)
    return running


def _webhdfs(folder: Path, op: str, path: str) -> requests.Response:
    http = _ports(folder)["namenode_http"]
    url = f"http://127.0.0.1:{http}/webhdfs/v1{path}?op={op}&user.name=root"
    return requests.get(url, timeout=30)


@pytest.fixture(scope="module")
def first_run(folder: Path) -> Iterator[dict]:
    """The first run: the banner, the cluster's JVM, and alice's cell on YARN; then stopped."""
    up = _up(folder, DYNAMIC_CONFIG)
    seen: dict = {}
    with running(up):
        seen["banner"] = "".join(up.output)
        seen["services"] = up.api("GET", "/services").json()
        jvms = _cluster_jvms(folder)
        seen["jvm_users"] = [p.username() for p in jvms]
        seen["jvm_cmdline"] = jvms[0].cmdline() if jvms else []
        seen["jvm_ancestors"] = {p.pid for p in up.descendants()} >= {p.pid for p in jvms}
        up.start_server(STUDENT)
        seen["env"] = server_environ(up, STUDENT)
        seen["server_user"] = server_process(up, STUDENT).username()
        started = up.server_api(STUDENT, "POST", "/kernels", json={"name": "scalelab-pyspark"})
        assert started.status_code == 201, started.text
        kernel = started.json()["id"]
        reply = asyncio.run(execute(up, STUDENT, kernel, SPARK_CELL, timeout_s=300))
        seen["reply"] = reply
        if reply["status"] == "ok":
            answer = json.loads(reply["stdout"].strip().splitlines()[-1])
            seen["answer"] = answer
            web = _ports(folder)["web"]
            apps = f"http://127.0.0.1:{web}/ws/v1/cluster/apps/{answer['application']}"
            seen["app"] = requests.get(apps, timeout=30).json()["app"]
            seen["containers_idle"] = _containers_when_idle(apps)
            again = asyncio.run(execute(up, STUDENT, kernel, "spark.range(10).count()", 300))
            seen["again"] = again
        seen["home"] = _webhdfs(folder, "GETFILESTATUS", f"/course/home/{STUDENT}").json()
        up.server_api(STUDENT, "DELETE", f"/kernels/{kernel}")
        seen["ports"] = _ports(folder)
        doctor = [sys.executable, "-m", "scalelab", "doctor", "--hadoop", "--quick"]
        doctor += ["--state-dir", str(folder / "state"), "--port", str(up.port)]
        seen["doctor"] = subprocess.run(doctor, capture_output=True, text=True, timeout=300)
    seen["jvms_after_stop"] = [p.pid for p in _cluster_jvms(folder) if p.is_running()]
    seen["free_after_stop"] = {name: port_free(port) for name, port in seen["ports"].items()}
    return seen


def test_the_cluster_runs_as_a_service_of_the_hub_under_its_own_user(first_run: dict, folder: Path):
    ports = first_run["ports"]
    store = f"hdfs://127.0.0.1:{ports['namenode_rpc']}/course"
    assert f"Course store: {store}" in first_run["banner"]
    assert (
        f"Hadoop test cluster: HDFS hdfs://127.0.0.1:{ports['namenode_rpc']}"
        in (first_run["banner"])
    )
    assert SERVICE_NAME in first_run["services"]
    assert first_run["jvm_users"] == [CLUSTER_USER]  # one JVM, not root's
    assert first_run["jvm_ancestors"]
    cmdline = first_run["jvm_cmdline"]
    assert "--keep-data" in cmdline and "--until-signal" in cmdline
    assert cmdline[cmdline.index("--namenode-ports") + 1] == (
        f"{ports['namenode_rpc']},{ports['namenode_http']}"
    )
    hadoop = folder / "state" / "hadoop"
    owner = pwd.getpwnam(CLUSTER_USER).pw_uid
    data = (hadoop / "data").stat()
    assert (data.st_uid, stat.S_IMODE(data.st_mode)) == (owner, 0o700)
    for name in ("core-site.xml", "hdfs-site.xml", "yarn-site.xml"):
        assert stat.S_IMODE((hadoop / "conf" / name).stat().st_mode) == 0o644
    core = (hadoop / "conf" / "core-site.xml").read_text()
    assert f"hdfs://127.0.0.1:{ports['namenode_rpc']}" in core


def test_a_students_pyspark_cell_runs_on_yarn_as_the_student(first_run: dict, folder: Path):
    assert first_run["server_user"] == f"jupyter-{STUDENT}"  # the student's system user
    env = first_run["env"]
    assert env["HADOOP_CONF_DIR"] == str(folder / "state" / "hadoop" / "conf")
    assert env["HADOOP_USER_NAME"] == STUDENT
    assert re.fullmatch(r"hdfs://127\.0\.0\.1:\d+/course", env["SCALELAB_STORE_URL"])
    assert first_run["reply"]["status"] == "ok", first_run["reply"]
    answer = first_run["answer"]
    assert (answer["total"], answer["master"]) == (499500, "yarn")
    assert (first_run["app"]["user"], first_run["app"]["finalStatus"]) == (
        STUDENT,
        "UNDEFINED",  # still running when asked: the kernel's own application
    )
    home = first_run["home"]["FileStatus"]
    assert (home["owner"], home["permission"]) == (STUDENT, "700")


def test_with_dynamic_allocation_an_idle_kernel_gives_its_executors_back(first_run: dict):
    # The guide's recipe, set by the operator: the idle kernel's application keeps its
    # application master alone, and the next cell gets executors again.
    assert first_run["containers_idle"] == 1
    assert first_run["again"]["status"] == "ok", first_run["again"]
    assert first_run["again"]["result"] == "10"


def test_the_doctor_checks_the_running_cluster(first_run: dict):
    report = first_run["doctor"].stdout
    ports = first_run["ports"]
    store = f"hdfs://127.0.0.1:{ports['namenode_rpc']}/course"
    # (a warning: the data sets are not fetched into the new store)
    assert f"Course store: {store} is reachable" in report, report
    assert first_run["doctor"].returncode == 0 and "All checks passed." in report, report
    assert "[ ok ] HDFS namenode:" in report, report
    assert "[ ok ] YARN ResourceManager:" in report, report


def test_the_cluster_stops_with_the_hub(first_run: dict):
    assert first_run["jvms_after_stop"] == []
    assert first_run["free_after_stop"] == {name: True for name in first_run["ports"]}


def test_a_restart_keeps_the_ports_and_the_data(first_run: dict, folder: Path):
    up = _up(folder)
    with running(up):
        assert _ports(folder) == first_run["ports"]
        banner = "".join(up.output)
        assert f"hdfs://127.0.0.1:{first_run['ports']['namenode_rpc']}/course" in banner
        kept = _webhdfs(folder, "OPEN", f"/course/home/{STUDENT}/kept.txt")
        assert kept.status_code == 200, kept.text
        assert kept.content == b"kept across restarts\n"
        owner = _webhdfs(folder, "GETFILESTATUS", f"/course/home/{STUDENT}/kept.txt").json()
        assert owner["FileStatus"]["owner"] == STUDENT
    assert _cluster_jvms(folder) == []


def test_hadoop_and_store_together_are_refused(folder: Path, tmp_path: Path):
    up = ScaleLabUp(tmp_path / "state")
    up.argv += ["--hadoop", "--store", "hdfs://127.0.0.1:1/course"]
    proc = psutil.Popen(up.argv, env=up.env, stdout=-1, stderr=-2, text=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "--hadoop puts the course store on the test cluster's HDFS: drop --store" in out
    assert not (tmp_path / "state" / "hadoop").exists()
