"""The PySpark kernel's session settings (pure parts, and the files they write)."""

from __future__ import annotations

from pathlib import Path

from scalelab.kernels import spark_archive
from scalelab.kernels.spark_defaults import security_conf
from scalelab.kernels.spark_session import driver_conf, session_conf, ui_proxy_path


def test_ui_goes_through_the_servers_proxy_under_a_hub():
    conf = driver_conf(ui_port=41234, service_prefix="/user/alice/")
    assert conf == {
        "spark.ui.port": "41234",
        "spark.ui.proxyBase": "/user/alice/sparkui/41234",
        # Spark's redirects (its root, the logo) under proxyBase, on the browser's address.
        "spark.ui.proxyRedirectUri": "/",
    }
    assert ui_proxy_path("/user/alice/", 41234) == "/user/alice/sparkui/41234/"
    assert driver_conf(ui_port=41234) == {"spark.ui.port": "41234"}  # no hub: no proxy base
    assert driver_conf() == {}


def test_the_drivers_temporary_folder_is_the_servers_and_the_log4j_file_kept():
    conf = driver_conf(log4j_file="/logs/driver.log4j2", tmp_dir="/tmp/scalelab-runtime-a/tmp")
    assert conf["spark.driver.extraJavaOptions"] == (
        "-Dlog4j2.configurationFile=file:/logs/driver.log4j2 "
        "-Djava.io.tmpdir=/tmp/scalelab-runtime-a/tmp"
    )
    # a folder with a space is one option (Spark splits the options as a shell would)
    spaced = driver_conf(tmp_dir="/srv/run time/tmp")["spark.driver.extraJavaOptions"]
    assert spaced == '"-Djava.io.tmpdir=/srv/run time/tmp"'
    env = {"SCALELAB_SPARK_MASTER": "local[2]", "TMPDIR": "/tmp/scalelab-runtime-b/tmp"}
    assert session_conf(env, None)["spark.driver.extraJavaOptions"].endswith(
        "-Djava.io.tmpdir=/tmp/scalelab-runtime-b/tmp"
    )


def test_session_conf_from_the_hub_with_a_port_and_a_driver_log(tmp_path: Path):
    env = {
        "SCALELAB_SPARK_MASTER": "spark://m:7077",
        "SCALELAB_SPARK_DRIVER_MEMORY": "4g",
        "JUPYTERHUB_USER": "alice",
        "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/",
    }
    conf = session_conf(env, tmp_path / "logs")
    assert conf["spark.master"] == "spark://m:7077"
    assert conf["spark.driver.memory"] == "4g"
    assert conf["spark.app.name"] == "scalelab-alice"
    port = int(conf["spark.ui.port"])
    assert 0 < port < 65536
    assert conf["spark.ui.proxyBase"] == f"/user/alice/sparkui/{port}"
    props = conf["spark.driver.extraJavaOptions"].split("file:", 1)[1]
    text = Path(props).read_text()
    assert f"appender.file.fileName = {tmp_path / 'logs'}/spark-driver-" in text
    assert "appender.console.filter.threshold.level = warn" in text


def test_every_session_scalelab_starts_authenticates_and_encrypts_its_rpc():
    local, again = session_conf({}, None), session_conf({}, None)
    assert local["spark.authenticate"] == local["spark.network.crypto.enabled"] == "true"
    secret = local["spark.authenticate.secret"]
    assert len(secret) == 64 and secret != again["spark.authenticate.secret"]  # per application
    assert security_conf("yarn", "s") == {  # YARN makes and hands out its own secret
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
    }
    assert security_conf("spark://m:7077", "s") == {}  # the standalone cluster's own setting
    assert security_conf("k8s://https://api:6443", "s") == {}
    ops = '{"spark.network.crypto.enabled": "false"}'  # ops' word wins
    assert session_conf({"SCALELAB_SPARK_CONF": ops}, None)["spark.network.crypto.enabled"] == (
        "false"
    )


def test_without_hub_settings_the_defaults_and_no_log_file():
    conf = session_conf({}, None)
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.driver.memory"] == "1g"
    # no log file, no temporary folder: only the class-data archive's options, if built
    assert conf.get("spark.driver.extraJavaOptions", "") == " ".join(spark_archive.java_options())
    assert "spark.ui.proxyBase" not in conf


class _FakeSession:
    """What ui_url reads of a SparkSession: ``sparkContext.uiWebUrl``."""

    def __init__(self, web_url: str | None):
        self.sparkContext = type("SC", (), {"uiWebUrl": web_url})()


def test_the_printed_ui_url_is_the_jobs_page_not_the_root_that_redirects_out_of_the_proxy():
    from scalelab.kernels.spark_session import ui_url

    session = _FakeSession("http://10.0.0.5:41234")
    hub = {"JUPYTERHUB_SERVICE_PREFIX": "/user/alice/"}
    assert ui_url(session, hub) == "/user/alice/sparkui/41234/jobs/"
    assert ui_url(session, {}) == "http://127.0.0.1:41234/jobs/"
    assert ui_url(_FakeSession(None), hub) is None
