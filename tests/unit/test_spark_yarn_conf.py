"""``spark.master = yarn`` through ScaleLab's configuration: the hub's settings
(``spark_master``, ``hadoop_conf_dir``, ``spark_conf``) -> the server's environment -> the
kernel session's settings, with Spark's jars and PySpark local to the NodeManagers (pure parts,
and the files they read). Spark on the test cluster's YARN itself:
tests/integration/hadoop/test_spark_yarn.py."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pyspark
import pytest
from traitlets.config import Config

from scalelab.kernels.spark_session import SparkStartError, ops_conf, session_conf
from scalelab.kernels.spark_yarn import (
    is_yarn,
    missing_conf_dir,
    pyspark_archives,
    spark_home,
    staging_dir,
    yarn_conf,
    yarn_environment,
)
from scalelab.spawner.environment import server_environment
from scalelab.spawner.validation import validate_spawner_config

PYSPARK_HOME = Path(pyspark.__file__).parent


def test_the_hubs_settings_reach_the_server_as_one_name_each():
    env = server_environment(
        store_url="hdfs://nn:8020/course",
        store_options={},
        spark_master="yarn",
        spark_driver_memory="2g",
        spark_conf={"spark.executor.memory": "2g", "spark.executor.instances": "4"},
        hadoop_conf_dir="/etc/hadoop/conf",
    )
    assert env["SCALELAB_SPARK_MASTER"] == "yarn"
    assert json.loads(env["SCALELAB_SPARK_CONF"]) == {
        "spark.executor.instances": "4",
        "spark.executor.memory": "2g",
    }
    assert env["HADOOP_CONF_DIR"] == env["YARN_CONF_DIR"] == "/etc/hadoop/conf"
    plain = server_environment(
        store_url="file:///s", store_options={}, spark_master="local[*]", spark_driver_memory="1g"
    )
    assert plain["SCALELAB_SPARK_CONF"] == "{}"
    assert "HADOOP_CONF_DIR" not in plain and "YARN_CONF_DIR" not in plain


@pytest.mark.parametrize(
    ("spark_conf", "message"),
    [
        ({"executor.memory": "2g"}, r"'executor.memory' is not a Spark setting"),
        ({"spark.master": "yarn"}, r"set spark.master with c.ScaleLabSpawner.spark_master"),
        ({"spark.driver.memory": "4g"}, r"with c.ScaleLabSpawner.spark_driver_memory"),
    ],
)
def test_ops_spark_conf_is_checked_when_the_hub_starts(spark_conf: dict, message: str):
    c = Config()
    c.ScaleLabSpawner.spark_conf = spark_conf
    with pytest.raises(ValueError, match=message):
        validate_spawner_config(c)


def test_a_good_yarn_configuration_passes_the_hubs_check(tmp_path: Path):
    c = Config()
    c.ScaleLabSpawner.spark_master = "yarn"
    c.ScaleLabSpawner.hadoop_conf_dir = str(tmp_path)
    c.ScaleLabSpawner.spark_conf = {"spark.executor.memoryOverhead": "1g"}
    validate_spawner_config(c)


@pytest.mark.parametrize(("make", "what"), [(None, "does not exist"), ("file", "is not a folder")])
def test_a_hadoop_conf_dir_that_is_no_folder_here_is_refused_at_hub_start(
    tmp_path: Path, make: str | None, what: str
):
    folder = tmp_path / "conf"
    if make == "file":
        folder.write_text("not a folder")
    c = Config()
    c.ScaleLabSpawner.spark_master = "yarn"
    c.ScaleLabSpawner.hadoop_conf_dir = str(folder)
    with pytest.raises(ValueError, match=rf"c\.ScaleLabSpawner\.hadoop_conf_dir = .* {what}"):
        validate_spawner_config(c)


def test_a_remote_backends_hadoop_conf_dir_is_the_nodes_and_not_checked_here():
    """Slurm's and Kubernetes' servers read the folder on their nodes or in their image."""
    from scalelab.spawner.slurm import ScaleLabSlurmSpawner

    c = Config()
    c.ScaleLabSlurmSpawner.hadoop_conf_dir = "/etc/hadoop/conf-on-the-nodes"
    c.ScaleLabSlurmSpawner.exec_prefix = ""  # jobs as the hub's user (no sudo here)
    c.ScaleLabSlurmSpawner.args = ["--allow-root"]
    validate_spawner_config(c, ScaleLabSlurmSpawner)


def test_yarn_is_client_mode_with_sparks_jars_on_each_nodemanager():
    assert is_yarn("yarn") and is_yarn(" YARN ") and not is_yarn("local[*]")
    assert yarn_conf(Path("/opt/spark")) == {
        "spark.submit.deployMode": "client",
        "spark.yarn.jars": "local:/opt/spark/jars/*",
    }
    # pip's PySpark is a Spark installation: its jars and PySpark's archives are there.
    home = spark_home({})
    assert home == PYSPARK_HOME
    assert any(home.glob("jars/spark-yarn_*.jar"))
    assert spark_home({"SPARK_HOME": "/opt/spark"}) == Path("/opt/spark")
    archives = pyspark_archives(home).split(",")
    assert archives[0] == f"local:{home}/python/lib/pyspark.zip"
    assert archives[1].startswith(f"local:{home}/python/lib/py4j-")
    with pytest.raises(FileNotFoundError, match="PYSPARK_ARCHIVES_PATH"):
        pyspark_archives(Path("/nonexistent"))


def test_what_ops_set_in_the_environment_wins():
    home = PYSPARK_HOME
    env = yarn_environment({}, home, "/venv/bin/python")
    assert env["PYSPARK_PYTHON"] == "/venv/bin/python"
    assert env["PYSPARK_ARCHIVES_PATH"] == pyspark_archives(home)
    given = {"PYSPARK_ARCHIVES_PATH": "hdfs:///spark/pyspark.zip", "PYSPARK_PYTHON": "/opt/py"}
    assert yarn_environment(given, home, "/venv/bin/python") == {}


def test_a_yarn_master_needs_the_clusters_configuration(tmp_path: Path):
    assert "neither HADOOP_CONF_DIR nor YARN_CONF_DIR" in missing_conf_dir({})
    assert "c.ScaleLabSpawner.hadoop_conf_dir" in missing_conf_dir({})
    lacking = missing_conf_dir({"HADOOP_CONF_DIR": str(tmp_path)})
    assert f"no yarn-site.xml in HADOOP_CONF_DIR={tmp_path}" in lacking
    (tmp_path / "yarn-site.xml").write_text("<configuration/>")
    assert missing_conf_dir({"HADOOP_CONF_DIR": str(tmp_path)}) is None
    assert missing_conf_dir({"HADOOP_CONF_DIR": "/nowhere", "YARN_CONF_DIR": str(tmp_path)}) is None


def test_the_kernels_session_on_yarn_has_scalelabs_defaults_under_ops_settings(tmp_path: Path):
    env = {
        "SCALELAB_SPARK_MASTER": "yarn",
        "SCALELAB_SPARK_DRIVER_MEMORY": "2g",
        "SCALELAB_SPARK_CONF": json.dumps(
            {
                "spark.executor.memory": "2g",
                "spark.yarn.jars": "hdfs:///spark/jars/*",  # ops' own copy wins
                "spark.driver.extraJavaOptions": "-Dcourse=dl",
            }
        ),
        "JUPYTERHUB_USER": "alice",
    }
    conf = session_conf(env, tmp_path / "logs")
    assert conf["spark.master"] == "yarn"
    assert conf["spark.submit.deployMode"] == "client"
    assert conf["spark.yarn.jars"] == "hdfs:///spark/jars/*"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.driver.memory"] == "2g"
    assert "spark.driver.host" not in conf  # on a cluster the executors must reach the driver
    # Ops' JVM options and ScaleLab's driver log both.
    options = conf["spark.driver.extraJavaOptions"]
    assert options.startswith("-Dcourse=dl -Dlog4j2.configurationFile=file:"), options
    assert "SharedArchiveFile" not in options  # HADOOP_CONF_DIR on its class path: no archive
    plain = session_conf({"SCALELAB_SPARK_MASTER": "yarn"}, None)
    assert plain["spark.yarn.jars"] == f"local:{PYSPARK_HOME}/jars/*"


def test_applications_stage_in_the_students_store_home_when_the_store_is_on_hdfs():
    store = {"SCALELAB_STORE_URL": "hdfs://nn:8020/course/", "JUPYTERHUB_USER": "alice"}
    assert staging_dir(store) == "hdfs://nn:8020/course/home"
    assert staging_dir({**store, "HADOOP_USER_NAME": "alice"}) == "hdfs://nn:8020/course/home"
    # Another Hadoop user than the hub's name (Spark appends its own): Spark's default.
    assert staging_dir({**store, "HADOOP_USER_NAME": "s1234"}) is None
    assert staging_dir({**store, "SCALELAB_STORE_URL": "s3://bucket/course"}) is None
    assert staging_dir({"SCALELAB_STORE_URL": "hdfs://nn:8020/course"}) is None
    conf = session_conf({**store, "SCALELAB_SPARK_MASTER": "yarn"}, None)
    assert conf["spark.yarn.stagingDir"] == "hdfs://nn:8020/course/home"
    ops = json.dumps({"spark.yarn.stagingDir": "hdfs:///apps/spark/staging"})
    conf = session_conf(
        {**store, "SCALELAB_SPARK_MASTER": "yarn", "SCALELAB_SPARK_CONF": ops}, None
    )
    assert conf["spark.yarn.stagingDir"] == "hdfs:///apps/spark/staging"
    assert "spark.yarn.stagingDir" not in session_conf(store, None)  # local[*]


@pytest.mark.parametrize("raw", ["{not json", '["spark.x"]', '{"spark.x": 2}', '{"x": "1"}'])
def test_a_malformed_spark_conf_is_one_message_naming_the_setting(raw: str):
    with pytest.raises(
        SparkStartError, match=r"SCALELAB_SPARK_CONF .*c\.ScaleLabSpawner\.spark_conf"
    ):
        ops_conf({"SCALELAB_SPARK_CONF": raw})
    assert ops_conf({}) == {} and ops_conf({"SCALELAB_SPARK_CONF": ""}) == {}


def test_a_kernel_with_a_malformed_spark_conf_starts_and_its_spark_says_why(
    monkeypatch: pytest.MonkeyPatch,
):
    from scalelab.kernels.spark_session import begin

    monkeypatch.setenv("SCALELAB_SPARK_CONF", "{not json")
    namespace: dict = {}
    banner = begin(namespace, None, None)
    assert banner.startswith("spark: unavailable: SCALELAB_SPARK_CONF is not a JSON object")
    with pytest.raises(SparkStartError, match=r"c\.ScaleLabSpawner\.spark_conf"):
        namespace["spark"].range(1)


def test_container_logs_are_found_through_the_resourcemanager_and_copied_once(tmp_path: Path):
    from scalelab.common.logfiles import LOG_NAME
    from scalelab.kernels.yarn_logs import (
        ContainerLogMirror,
        container_log_url,
        containers,
        log_contents,
        log_name,
    )

    app, attempt, cid = (
        "application_17_0001",
        "appattempt_17_0001_000001",
        "container_17_0001_01_000002",
    )
    rm = "127.0.0.1:8088"
    answers = {  # the ResourceManager's REST answers, as Hadoop 3.5 gives them
        f"http://{rm}/ws/v1/cluster/apps/{app}/appattempts": {
            "appAttempts": {"appAttempt": [{"appAttemptId": attempt}]}
        },
        f"http://{rm}/ws/v1/cluster/apps/{app}/appattempts/{attempt}/containers": {
            "container": [{"containerId": cid, "nodeHttpAddress": "http://localhost:8042"}]
        },
    }
    assert containers(rm, app, answers.__getitem__) == [
        {"id": cid, "node": "http://localhost:8042"}
    ]
    url = container_log_url("http://localhost:8042", cid)
    assert url == f"http://localhost:8042/ws/v1/node/containerlogs/{cid}/stderr"
    assert LOG_NAME.match(log_name(cid))  # a name the log view serves
    with pytest.raises(ValueError, match="not a YARN container id"):
        log_name("../../etc/passwd")

    def answer(text: bytes) -> bytes:  # a NodeManager's containerlogs answer, as 3.5 gives it
        return (
            (
                f"Container: {cid} on localhost:45873\nLogAggregationType: LOCAL\n====\n"
                f"LogType:stderr\nLogLastModifiedTime:Fri Dec 04 00:34:02 +0000 2026\n"
                f"LogLength:{len(text)}\nLogContents:\n"
            ).encode()
            + text
            + b"End of LogType:stderr.This log file belongs to a running container"
        )

    assert log_contents(answer(b"a\nb")) == b"a\nb"
    assert log_contents(b"plain") == b"plain"
    logs = {url: answer(b"line 1\n")}
    mirror = ContainerLogMirror(rm, app, tmp_path, running=lambda: True)
    mirror.look(answers.__getitem__, logs.__getitem__)
    logs[url] = answer(b"line 1\nline 2\n")
    mirror.look(answers.__getitem__, logs.__getitem__)
    mirror.look(answers.__getitem__, logs.__getitem__)
    assert (tmp_path / log_name(cid)).read_text() == "line 1\nline 2\n"
    # Killed between two looks: gone from the list, its last lines read from its NodeManager.
    logs[url] = answer(b"line 1\nline 2\nRECEIVED SIGNAL TERM\n")
    listing = f"http://{rm}/ws/v1/cluster/apps/{app}/appattempts/{attempt}/containers"
    answers[listing] = {"container": []}
    mirror.look(answers.__getitem__, logs.__getitem__)
    assert (tmp_path / log_name(cid)).read_text().endswith("line 2\nRECEIVED SIGNAL TERM\n")
    asked: list[str] = []
    mirror.look(answers.__getitem__, lambda log_url: asked.append(log_url) or logs[log_url])
    assert asked == []  # read to its end once: never asked again


def _rm_at(port: int) -> dict[str, str]:
    return {"yarn.resourcemanager.address": f"127.0.0.1:{port}"}


def _yarn_site(folder: Path, **props: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = "".join(
        f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items()
    )
    (folder / "yarn-site.xml").write_text(f"<configuration>{body}</configuration>")
    return folder


def test_the_resourcemanagers_a_client_submits_to():
    from scalelab.kernels.spark_yarn import resourcemanager_addresses

    assert resourcemanager_addresses({"yarn.resourcemanager.address": "rm:8050"}) == [("rm", 8050)]
    assert resourcemanager_addresses({"yarn.resourcemanager.hostname": "rm"}) == [("rm", 8032)]
    ha = {
        "yarn.resourcemanager.ha.enabled": "true",
        "yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
        "yarn.resourcemanager.hostname.rm1": "master1",
        "yarn.resourcemanager.address.rm2": "master2:8050",
    }
    assert resourcemanager_addresses(ha) == [("master1", 8032), ("master2", 8050)]
    assert resourcemanager_addresses({}) == []


def test_a_resourcemanager_that_does_not_answer_is_named_at_once(tmp_path: Path):
    from scalelab.kernels.spark_yarn import unreachable_resourcemanager

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        down = _yarn_site(
            tmp_path / "down", **{"yarn.resourcemanager.address": f"127.0.0.1:{port}"}
        )
        problem = unreachable_resourcemanager({"HADOOP_CONF_DIR": str(down)})
    assert problem is not None
    assert f"the ResourceManager at 127.0.0.1:{port} does not answer" in problem
    assert "scalelab doctor" in problem and "local[*]" in problem
    with socket.socket() as up:
        up.bind(("127.0.0.1", 0))
        up.listen()
        port = up.getsockname()[1]
        live = _yarn_site(tmp_path / "up", **_rm_at(port))
        assert unreachable_resourcemanager({"YARN_CONF_DIR": str(live)}) is None
    assert (
        unreachable_resourcemanager({"HADOOP_CONF_DIR": str(_yarn_site(tmp_path / "none"))}) is None
    )


def test_a_yarn_kernel_whose_resourcemanager_is_down_says_so_at_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The cell that uses ``spark`` ends with the ResourceManager's address, instead of Spark's
    minutes of retries that showed nothing in the notebook."""
    from scalelab.kernels.spark_session import begin

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        conf = _yarn_site(
            tmp_path / "conf", **{"yarn.resourcemanager.address": f"127.0.0.1:{port}"}
        )
        monkeypatch.setenv("SCALELAB_SPARK_MASTER", "yarn")
        monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
        for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_ARCHIVES_PATH"):
            monkeypatch.delenv(name, raising=False)
        namespace: dict = {}
        banner = begin(namespace, None, None)
        assert banner.startswith("spark: yarn with spark.driver.memory=")
        with pytest.raises(SparkStartError, match=rf"ResourceManager at 127\.0\.0\.1:{port} does"):
            namespace["spark"].range(1)
